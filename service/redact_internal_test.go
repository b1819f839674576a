package service

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/cdc/file"
	"github.com/ragsync/ragsync/cdc/kafka"
	"github.com/ragsync/ragsync/config"
	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/internal/openaitest"
	"github.com/ragsync/ragsync/internal/redact"
)

// The secrets every test here tries to leak: an API key the provider's
// error body quotes, and the password of the index's Postgres URL.
const (
	leakAPIKey     = "sk-proj-LeakT3stKey"
	leakPgPassword = "PgL3akPassw0rd"
	leakPgURL      = "postgres://ragsync_owner:" + leakPgPassword + "@db.leak.internal:5432/leakdb"
)

// leakRedactor is the process's redactor as the command builds it: taught
// the configured secrets.
func leakRedactor() *redact.Redactor {
	cfg := config.Default()
	cfg.Embedder.APIKey = leakAPIKey
	cfg.Postgres.URL = leakPgURL
	return redact.New(cfg.Secrets()...)
}

// providerError is what the OpenAI client returns when the provider's
// error body quotes the key.
func providerError(t *testing.T) error {
	t.Helper()
	srv := openaitest.New(t, openaitest.Options{Dimensions: 8, APIKey: leakAPIKey})
	srv.FailNext(1, openaitest.Fault{Status: 400, Message: "Incorrect API key provided: " + leakAPIKey + "."})
	emb, err := embedder.NewOpenAI(embedder.Config{BaseURL: srv.URL, APIKey: leakAPIKey, Model: "m", Dimensions: 8})
	require.NoError(t, err)
	t.Cleanup(emb.Close)
	_, err = emb.Embed(t.Context(), []string{"a document"})
	require.Error(t, err)
	require.Contains(t, err.Error(), leakAPIKey, "the provider's error quotes the key")
	return err
}

func requireNoSecret(t *testing.T, what string, b []byte) {
	t.Helper()
	for _, s := range []string{leakAPIKey, leakPgPassword} {
		require.NotContains(t, string(b), s, "%s holds a secret in clear", what)
	}
}

// TestDeadLettersRedactSecrets dead-letters a change whose cause quotes the
// API key (the provider's error) and the Postgres URL with its password,
// through serve's wrapper, into the file and the Kafka stores: neither
// secret is in what they wrote, the reason still says what failed, and
// the error class (read by behaviour) is kept.
func TestDeadLettersRedactSecrets(t *testing.T) {
	red := leakRedactor()
	cause := providerError(t)
	pgCause := &wrapped{msg: "apply: connect " + leakPgURL + ": connection refused", err: cause}
	m := cdc.Record{Raw: cdc.Raw{Topic: "db.public.docs", Offset: 3, Key: []byte(`{"id":3}`), Value: []byte(`{"after":{"id":3}}`), Headers: []cdc.Header{{Key: "traceparent", Value: []byte("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")}}}}

	t.Run("file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "dlq.jsonl")
		dl := redactedDeadLetters{file.NewDeadLetters(path, "test"), red}
		require.NoError(t, dl.Put(t.Context(), m, cause))
		require.NoError(t, dl.Put(t.Context(), m, pgCause))
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		requireNoSecret(t, "the dead-letter file", b)
		list, err := file.NewDeadLetterFile(path, "").List(t.Context(), 0)
		require.NoError(t, err)
		require.Len(t, list, 2)
		require.Contains(t, list[0].ErrorMessage, "Incorrect API key provided: "+redact.Mask)
		require.Contains(t, list[1].ErrorMessage, "ragsync_owner:"+redact.Mask+"@")
		require.Equal(t, "ragsync.pipeline.ApplyError", list[0].ErrorClass)
	})
	t.Run("kafka", func(t *testing.T) {
		const dlqTopic = "db.public.docs.ragsync-dlq"
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, m.Topic))
		require.NoError(t, err)
		t.Cleanup(c.Close)
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
		require.NoError(t, err)
		t.Cleanup(cl.Close)
		dl := redactedDeadLetters{kafka.NewDeadLetters(cl, dlqTopic, "test"), red}
		require.NoError(t, dl.Put(t.Context(), m, cause))
		require.NoError(t, dl.Put(t.Context(), m, pgCause))
		list, err := kafka.NewDeadLetterTopic(cl, dlqTopic, "").List(t.Context(), 0)
		require.NoError(t, err)
		require.Len(t, list, 2)
		for _, d := range list {
			requireNoSecret(t, "a dead letter's value", d.Value)
			for _, h := range d.Headers {
				requireNoSecret(t, "dead-letter header "+h.Key, h.Value)
			}
		}
		require.Contains(t, list[0].ErrorMessage, "Incorrect API key provided: "+redact.Mask)
	})
}

// wrapped is an error with its own message over a cause, as a caller's
// fmt.Errorf("…: %w") would build.
type wrapped struct {
	msg string
	err error
}

func (w *wrapped) Error() string { return w.msg }
func (w *wrapped) Unwrap() error { return w.err }

// TestHealthEndpointsRedactSecrets asks /readyz while the index's Postgres
// refuses connections, with a URL that carries a user, a password, a host
// and a database: the body says what is wrong and points to the logs, and
// names none of them; the log line has the error with the password masked.
// A source problem quoting a URL is masked too, and /healthz says ok.
func TestHealthEndpointsRedactSecrets(t *testing.T) {
	red := leakRedactor()
	const url = "postgres://ragsync_owner:" + leakPgPassword + "@127.0.0.1:1/leakdb?sslmode=disable&connect_timeout=2"
	red.Add(redact.Password(url))
	ping := func(ctx context.Context) error {
		conn, err := pgx.Connect(ctx, url)
		if err == nil {
			conn.Close(ctx)
		}
		return err
	}
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(red.Writer(&logs), nil))
	var problem string
	h := redactedHealth(red, sourceReadyz(func() string { return problem },
		httpHandler(prometheus.NewRegistry(), ping, func() bool { return true }, func(context.Context) string { return "" }, logger)))

	get := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		b, err := io.ReadAll(rec.Body)
		require.NoError(t, err)
		return rec.Code, string(b)
	}
	code, body := get("/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "postgres: unreachable (connection refused); see the logs\n", body)
	for _, s := range []string{"ragsync_owner", leakPgPassword, "127.0.0.1", "leakdb"} {
		require.NotContains(t, body, s)
	}
	requireNoSecret(t, "the log", logs.Bytes())
	require.Contains(t, logs.String(), "connection refused", "the log has the error")
	// A second failing probe with the same problem logs nothing more.
	n := strings.Count(logs.String(), "\n")
	get("/readyz")
	require.Equal(t, n, strings.Count(logs.String(), "\n"))

	problem = "replication slot lost: reconnect with " + leakPgURL + " after the fix"
	code, body = get("/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	requireNoSecret(t, "/readyz with a source problem", []byte(body))
	require.Contains(t, body, "source: replication slot lost")

	code, body = get("/healthz")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ok\n", body)
}
