package main

import (
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
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

// TestStderrTerminalDecidesProgress: main finds whether the process's
// stderr is a terminal on the file itself (the commands later wrap it in
// the password-masking writer, which is no terminal), and backfill's
// --progress auto shows a bar exactly then.
func TestStderrTerminalDecidesProgress(t *testing.T) {
	for _, tc := range []struct {
		name string
		tty  bool
		mode string
	}{{"terminal", true, "bar"}, {"file", false, "log"}} {
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
			require.Equal(t, tc.tty, isTerminal(stderr))
			require.Equal(t, tc.mode, progressMode("auto", isTerminal(stderr)))
			require.Equal(t, "log", progressMode("log", tc.tty), "an explicit mode stays")
			require.Equal(t, "bar", progressMode("bar", tc.tty), "an explicit mode stays")
		})
	}
}
