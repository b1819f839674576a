package redact

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestString(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"postgres url", "connect postgres://u:s3cret@h:5432/db: refused", "connect postgres://u:xxxxx@h:5432/db: refused"},
		{"url password with raw @", "lookup postgres://u:p@ss@h/db", "lookup postgres://u:xxxxx@h/db"},
		{"url password with raw @ and slash", "postgres://u:p@ss/w@127.0.0.1:1/db", "postgres://u:xxxxx@127.0.0.1:1/db"},
		{"query parameter", "postgres://u@h/db?password=s3cret&sslmode=disable", "postgres://u@h/db?password=xxxxx&sslmode=disable"},
		{"key/value dsn", "host=h user=u password=s3cret dbname=db", "host=h user=u password=xxxxx dbname=db"},
		{"key/value dsn quoted", `host=h password='se cr\'et' dbname=db`, "host=h password=xxxxx dbname=db"},
		{"key/value dsn spaced", "host=h password = s3cret dbname=db", "host=h password = xxxxx dbname=db"},
		{"redis url", "dial redis://default:s3cret@h:6379/0 failed", "dial redis://default:xxxxx@h:6379/0 failed"},
		{"rediss url without user", "rediss://:s3cret@h:6380", "rediss://:xxxxx@h:6380"},
		{"json log line stays json", `{"url":"redis://u:s3cret@h:6379","peer":"a@b"}`, `{"url":"redis://u:xxxxx@h:6379","peer":"a@b"}`},
		{"no secret", "postgres://u@h/db and user@example.com", "postgres://u@h/db and user@example.com"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := String(tc.in)
			require.Equal(t, tc.want, got)
			require.NotContains(t, got, "s3cret")
		})
	}
}

func TestPassword(t *testing.T) {
	require.Equal(t, "p@ss", Password("postgres://u:p@ss@h/db"))
	require.Equal(t, "s3cret", Password("host=h password=s3cret"))
	require.Equal(t, "se cret", Password("host=h password='se cret'"))
	require.Equal(t, "", Password("postgres://u@h/db"))
}

func TestRedactorLiteralSecrets(t *testing.T) {
	r := New("sk-live-abc123", "p@ss", "ab") // "ab" is too short to mask
	// A library error that split the password at its '@' still shows the
	// whole password nowhere, and the API key is masked where no pattern
	// would see it.
	got := r.String("lookup ss@h: no such host; key sk-live-abc123 rejected; p@ss; tab")
	require.Equal(t, "lookup ss@h: no such host; key xxxxx rejected; xxxxx; tab", got)
}

func TestWriter(t *testing.T) {
	var buf bytes.Buffer
	w := New("sk-live-abc123").Writer(&buf)
	n, err := fmt.Fprintf(w, "Error: open postgres://u:pw0rd@h/db with key sk-live-abc123\n")
	require.NoError(t, err)
	require.Equal(t, len("Error: open postgres://u:pw0rd@h/db with key sk-live-abc123\n"), n, "callers see their own byte count")
	require.Equal(t, "Error: open postgres://u:xxxxx@h/db with key xxxxx\n", buf.String())
}
