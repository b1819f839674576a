package child

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

func TestSettingsComposeWithSourceAndExtras(t *testing.T) {
	doc := "source:\n  kind: file\n" + Settings("public.articles", "postgres://h/db?application_name=x", "s1", "bench") + "log:\n  level: warn\n"
	var cfg map[string]any
	require.NoError(t, yaml.Unmarshal([]byte(doc), &cfg))
	require.Equal(t, "file", cfg["source"].(map[string]any)["kind"])
	require.Equal(t, map[string]any{"url": "postgres://h/db?application_name=x", "schema": "s1"}, cfg["postgres"])
	require.Equal(t, "bench", cfg["index"])
	require.Equal(t, "hashing", cfg["embedder"].(map[string]any)["provider"])
	require.Equal(t, "public.articles", cfg["tables"].([]any)[0].(map[string]any)["match"])
	require.Equal(t, "warn", cfg["log"].(map[string]any)["level"])
}

func TestDrained(t *testing.T) {
	require.Equal(t, 200000, Drained("applied=200000 chunks_cached=359999 op_c=20000 op_u=180000\n"))
	require.Equal(t, 7, Drained("op_d=7 skipped=3"))
	require.Zero(t, Drained("serve: nothing matched"))
}
