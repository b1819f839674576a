package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/cdc/file"
	"github.com/ragsync/ragsync/config"
	"github.com/ragsync/ragsync/internal/redact"
)

// TestErrorsRedactSecrets runs commands that fail to connect with a secret
// in each form a user can configure it, and checks that what ragsync prints
// names the problem but not the secret.
func TestErrorsRedactSecrets(t *testing.T) {
	tests := []struct {
		name   string
		secret string
		args   []string
		want   string
	}{
		{"postgres key/value dsn", "kvS3cretPw",
			[]string{"migrate", "--postgres-url", "host=127.0.0.1 port=1 user=u password=kvS3cretPw dbname=db sslmode=disable connect_timeout=2"},
			"password=xxxxx"},
		{"postgres url", "urlS3cretPw",
			[]string{"migrate", "--postgres-url", "postgres://u:urlS3cretPw@127.0.0.1:1/db?sslmode=disable&connect_timeout=2"},
			"u:xxxxx@127.0.0.1"},
		{"postgres url password with raw @", "rawPw@S3cretX",
			[]string{"migrate", "--postgres-url", "postgres://u:rawPw@S3cretX@127.0.0.1:1/db?sslmode=disable"},
			"percent-encode it as %40"},
		{"postgres url password query parameter", "qS3cretPw",
			[]string{"migrate", "--postgres-url", "postgres://u@127.0.0.1:1/db?password=qS3cretPw&sslmode=disable&connect_timeout=2"},
			"password=xxxxx"},
		{"redis url", "redisS3cretPw",
			[]string{"query", "--via", "redis", "--timeout", "3s", "--set", "frontdoor.redis_url=redis://u:redisS3cretPw@127.0.0.1:1/0", "q"},
			"Redis"},
		{"rediss url without user", "redissS3cretPw",
			[]string{"query", "--via", "redis", "--timeout", "3s", "--set", "frontdoor.redis_url=rediss://:redissS3cretPw@127.0.0.1:1/0", "q"},
			"Redis"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := runCLI(t, "", tc.args...)
			require.Error(t, err)
			require.Contains(t, out, "Error:", "the error is printed")
			require.Contains(t, out, tc.want)
			require.NotContains(t, out, tc.secret)
			// No fragment of a password split at its '@' either.
			for _, part := range strings.Split(tc.secret, "@") {
				require.NotContains(t, out, part)
			}
		})
	}
}

// TestLogsRedactSecrets checks that a log record quoting a secret, as a
// library error would, is masked on its way out.
func TestLogsRedactSecrets(t *testing.T) {
	var buf bytes.Buffer
	g := &globals{red: redact.New()}
	cfg := Config{config.Default()}
	cfg.Embedder.APIKey = "sk-proj-LogS3cret"
	cfg.FrontDoor.RedisURL = "redis://default:r3disPw@h:6379/0"
	g.red.Add(cfg.Secrets()...)
	logger := newLogger(g.red.Writer(&buf), LogConfig{}, true)
	logger.Warn("embed failed", "error", "401: Incorrect API key provided: sk-proj-LogS3cret", "redis", "dial h:6379 with r3disPw",
		"dsn", "host=h password=plainS3cret")
	out := buf.String()
	for _, s := range []string{"sk-proj-LogS3cret", "r3disPw", "plainS3cret"} {
		require.NotContains(t, out, s)
	}
	require.Contains(t, out, `"msg":"embed failed"`, "the record stays JSON")
}

// TestDLQListRedactsSecrets lists dead letters written without redaction
// (by an older ragsync, or another tool) whose reason quotes the API key
// and the Postgres URL with its password: dlq list, as text and as JSON,
// prints the reason with both masked.
func TestDLQListRedactsSecrets(t *testing.T) {
	const apiKey, pgPassword = "sk-proj-DlqL1stKey", "DlqPgPassw0rd"
	pgURL := "postgres://owner:" + pgPassword + "@db.internal:5432/idx"
	dir := t.TempDir()
	events := filepath.Join(dir, "events.jsonl")
	cause := fmt.Errorf("embeddings API returned 400 Bad Request: Incorrect API key provided: %s; then connect %s: refused", apiKey, pgURL)
	require.NoError(t, file.NewDeadLetters(events+".dlq.jsonl", "test").Put(t.Context(), cdc.Record{Raw: cdc.Raw{Offset: 1, Value: []byte(`{"id":1}`)}}, cause))
	raw, err := os.ReadFile(events + ".dlq.jsonl")
	require.NoError(t, err)
	require.Contains(t, string(raw), apiKey, "the stored dead letter holds the key in clear")
	cfg := dlqConfig(t, fmt.Sprintf("source:\n  kind: file\n  file:\n    path: %s\nembedder:\n  api_key: %s\npostgres:\n  url: %s\n", events, apiKey, pgURL))
	for _, args := range [][]string{{"list"}, {"list", "--json"}} {
		out := dlqLines(t, cfg, args...)
		require.Contains(t, out, "Incorrect API key provided: "+redact.Mask, "dlq %v", args)
		require.NotContains(t, out, apiKey, "dlq %v", args)
		require.NotContains(t, out, pgPassword, "dlq %v", args)
	}
}
