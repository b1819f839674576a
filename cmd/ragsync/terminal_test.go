package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/ragsync/ragsync/internal/pgtest"
	"github.com/ragsync/ragsync/internal/redact"
)

// openPTY opens a pseudo-terminal pair; the returned file is the terminal
// side a program would have as its stderr.
func openPTY(t *testing.T) *os.File {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { master.Close() })
	require.NoError(t, unix.IoctlSetPointerInt(int(master.Fd()), unix.TIOCSPTLCK, 0))
	n, err := unix.IoctlGetInt(int(master.Fd()), unix.TIOCGPTN)
	require.NoError(t, err)
	slave, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	require.NoError(t, err)
	t.Cleanup(func() { slave.Close() })
	return slave
}

// TestStderrTerminalFoundBeforeMasking: stderr is wrapped in the
// password-masking writer, which is no *os.File; whether it is a terminal
// (progress as a bar) must be decided on the real stderr before that.
func TestStderrTerminalFoundBeforeMasking(t *testing.T) {
	for _, tc := range []struct {
		name string
		tty  bool
	}{{"terminal", true}, {"file", false}} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr *os.File
			if tc.tty {
				stderr = openPTY(t)
			} else {
				f, err := os.Create(t.TempDir() + "/stderr")
				require.NoError(t, err)
				t.Cleanup(func() { f.Close() })
				stderr = f
			}
			g := &globals{red: redact.New()}
			root := newRoot(g)
			root.SetErr(stderr)
			root.SetOut(&nopWriter{})
			root.SetArgs([]string{"version"})
			require.NoError(t, root.Execute())
			require.NotSame(t, stderr, root.ErrOrStderr(), "stderr is wrapped by the masking writer")
			require.Equal(t, tc.tty, g.stderrTTY)
		})
	}
}

type nopWriter struct{}

func (nopWriter) Write(p []byte) (int, error) { return len(p), nil }

// TestBackfillDrawsItsBarOnATerminal: with --progress auto, a backfill
// whose stderr is a terminal draws a bar, though the stderr it writes to
// is the masking writer around the terminal.
func TestBackfillDrawsItsBarOnATerminal(t *testing.T) {
	e := newReindexEnv(t)
	_, err := e.pool.Exec(context.Background(), "CREATE TABLE "+e.schema+".src_notes (id int PRIMARY KEY, body text); INSERT INTO "+e.schema+".src_notes VALUES (1, 'a note')")
	require.NoError(t, err)
	master, tty := openPTYPair(t)
	var got bytes.Buffer
	read := make(chan struct{})
	go func() { // drains the terminal so the bar never blocks on it
		defer close(read)
		_, _ = io.Copy(&got, master)
	}()
	root := newRoot(&globals{red: redact.New()})
	root.SetErr(tty)
	root.SetOut(&nopWriter{})
	root.SetArgs(e.args("backfill", "--source-url", pgtest.URL(), "--table", e.schema+".src_notes"))
	require.NoError(t, root.Execute())
	tty.Close()
	<-read
	require.Contains(t, got.String(), "100%", "a bar, not log lines: %q", got.String())
}

// openPTYPair is openPTY with the master side, which reads what the
// program wrote to the terminal; it is closed at cleanup.
func openPTYPair(t *testing.T) (*os.File, *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { master.Close() })
	require.NoError(t, unix.IoctlSetPointerInt(int(master.Fd()), unix.TIOCSPTLCK, 0))
	n, err := unix.IoctlGetInt(int(master.Fd()), unix.TIOCGPTN)
	require.NoError(t, err)
	slave, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	require.NoError(t, err)
	return master, slave
}
