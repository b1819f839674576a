// Package scripts holds the shell scripts of the Makefile; its tests run
// their functions against files a test writes.
package scripts

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// debianMirror runs debian_mirror under set -euo pipefail, as
// compose-smoke.sh does, against root.
func debianMirror(t *testing.T, root string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command("bash", "-c", `set -euo pipefail; . ./debian-mirror.sh; debian_mirror "$1"`, "bash", root)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return out.String(), errb.String(), code
}

func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "etc/apt/sources.list.d"), 0o755))
	for name, body := range files {
		require.NoError(t, os.WriteFile(filepath.Join(root, name), []byte(body), 0o644))
	}
	return root
}

func TestDebianMirror(t *testing.T) {
	for _, tc := range []struct {
		name       string
		files      map[string]string
		want       string
		wantStderr string
		wantCode   int
	}{
		{
			name: "deb822 only (Debian 12)",
			files: map[string]string{"etc/apt/sources.list.d/debian.sources": `Types: deb
URIs: http://off.example/debian
Suites: bookworm
Enabled: no

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security

Types: deb deb-src
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main
`},
			want:       "http://mirror.example/debian\n",
			wantStderr: "(deb822 sources file ",
		},
		{
			name: "one-line only",
			files: map[string]string{"etc/apt/sources.list": `# deb http://commented.example/debian bookworm main
deb http://security.debian.org/debian-security bookworm-security main
deb [arch=amd64 signed-by=/usr/share/keyrings/a b.gpg] http://legacy.example/debian bookworm main
`},
			want:       "http://legacy.example/debian\n",
			wantStderr: "(one-line sources file ",
		},
		{
			name:       "one-line in sources.list.d",
			files:      map[string]string{"etc/apt/sources.list.d/mirror.list": "deb http://d.example/debian bookworm main\n"},
			want:       "http://d.example/debian\n",
			wantStderr: "mirror.list)",
		},
		{
			name:       "none",
			files:      map[string]string{},
			wantStderr: "none found",
			wantCode:   1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, stderr, code := debianMirror(t, writeFiles(t, tc.files))
			require.Equal(t, tc.wantCode, code, stderr)
			require.Equal(t, tc.want, out)
			require.Contains(t, stderr, tc.wantStderr)
		})
	}
}
