package config_test

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/config"
)

// An api_key of ${VAR} whose variable is unset is refused, naming the
// variable and the fix, where the server needs a key; a local server (which
// often takes none), an explicitly empty key, no api_key line, or a key
// given by RAGSYNC_EMBEDDER_API_KEY or --set still load and validate.
func TestUnsetAPIKeyVariable(t *testing.T) {
	const unset = "TEST_UNSET_EMBED_KEY"
	require.NoError(t, os.Unsetenv(unset))
	file := func(baseURL, keyLine string) string {
		return "embedder:\n  provider: openai\n  base_url: " + baseURL + "\n  model: text-embedding-3-small\n  dimensions: 1536\n" + keyLine
	}
	tests := []struct {
		name    string
		file    string
		env     map[string]string
		sets    []string
		wantErr string
	}{
		{name: "unset for OpenAI", file: file("https://api.openai.com/v1", "  api_key: ${"+unset+"}\n"),
			wantErr: "embedder.api_key: ${" + unset + "} is not set in the environment, so no key would be sent to api.openai.com; export " + unset + "=<your key>"},
		{name: "unset for another remote server", file: file("https://embeddings.example.com/v1", "  api_key: ${"+unset+"}\n"),
			wantErr: "${" + unset + "} is not set in the environment"},
		{name: "unset for Azure", file: "embedder:\n  provider: openai\n  api_type: azure\n  base_url: https://x.openai.azure.com\n  model: m\n  dimensions: 8\n  api_key: ${" + unset + "}\n",
			wantErr: "${" + unset + "} is not set in the environment"},
		{name: "unset for Ollama on this machine", file: file("http://127.0.0.1:11434/v1", "  api_key: ${"+unset+"}\n")},
		{name: "unset for a compose service", file: file("http://ollama:11434/v1", "  api_key: ${"+unset+"}\n")},
		{name: "set", file: file("https://api.openai.com/v1", "  api_key: ${"+unset+"}\n"), env: map[string]string{unset: "sk-x"}},
		{name: "explicitly empty", file: file("https://embeddings.example.com/v1", "  api_key: \"\"\n")},
		{name: "empty default", file: file("https://embeddings.example.com/v1", "  api_key: ${"+unset+":-}\n")},
		{name: "no api_key line", file: file("https://embeddings.example.com/v1", "")},
		{name: "given by the environment", file: file("https://api.openai.com/v1", "  api_key: ${"+unset+"}\n"), env: map[string]string{"RAGSYNC_EMBEDDER_API_KEY": "sk-x"}},
		{name: "given by --set", file: file("https://embeddings.example.com/v1", "  api_key: ${"+unset+"}\n"), sets: []string{"embedder.api_key="}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			cfg, err := config.Load(writeFile(t, tc.file), tc.sets)
			require.NoError(t, err)
			err = cfg.Validate(false)
			if tc.wantErr == "" {
				require.NoError(t, err)
				if tc.name == "unset for Ollama on this machine" {
					require.Equal(t, []string{"embedder.api_key: ${" + unset + "} is not set, so no key is sent to 127.0.0.1:11434; fine for a server that takes none, otherwise export " + unset + ` (write api_key: "" to say none is needed)`}, cfg.Warnings())
				}
				return
			}
			require.ErrorContains(t, err, tc.wantErr)
			require.ErrorContains(t, err, `or write api_key: "" if this server takes none`)
			require.NotContains(t, err.Error(), "required for", "one message for the one problem")
		})
	}
}

// A mistyped RAGSYNC_* variable is refused with the variable it most likely
// meant; one near no setting gets no guess.
func TestMistypedEnvironmentVariable(t *testing.T) {
	t.Setenv("RAGSYNC_EMBEDER_API_KEY", "sk-x")
	_, err := config.Load("", nil)
	require.ErrorContains(t, err, `environment RAGSYNC_EMBEDER_API_KEY: unknown setting "embeder_api_key"; did you mean RAGSYNC_EMBEDDER_API_KEY?`)

	t.Setenv("RAGSYNC_EMBEDER_API_KEY", "")
	require.NoError(t, os.Unsetenv("RAGSYNC_EMBEDER_API_KEY"))
	t.Setenv("RAGSYNC_POSTGRES_SCHEME", "x")
	_, err = config.Load("", nil)
	require.ErrorContains(t, err, "did you mean RAGSYNC_POSTGRES_SCHEMA?")

	require.NoError(t, os.Unsetenv("RAGSYNC_POSTGRES_SCHEME"))
	t.Setenv("RAGSYNC_ZZZZZZZZZZZZ", "x")
	_, err = config.Load("", nil)
	require.ErrorContains(t, err, `unknown setting "zzzzzzzzzzzz"`)
	require.NotContains(t, err.Error(), "did you mean")
}
