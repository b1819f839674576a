package orphan

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestChildDiesWithTestBinary: a process started through DieWithParent
// dies when the test binary that started it is killed (SIGKILL, as go test's
// timeout ends a hung binary), instead of running on.
func TestChildDiesWithTestBinary(t *testing.T) {
	if os.Getenv("ORPHAN_TEST_HELPER") == "1" {
		// The test binary in the middle: it starts the child and waits to
		// be killed.
		cmd := DieWithParent(exec.Command("sleep", "60"))
		require.NoError(t, cmd.Start())
		fmt.Printf("child %d\n", cmd.Process.Pid)
		time.Sleep(time.Minute)
		return
	}
	helper := exec.Command(os.Args[0], "-test.run", "^TestChildDiesWithTestBinary$", "-test.short", "-test.v")
	helper.Env = append(os.Environ(), "ORPHAN_TEST_HELPER=1")
	out, err := helper.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, helper.Start())
	pid := 0
	sc := bufio.NewScanner(out)
	for pid == 0 && sc.Scan() {
		_, _ = fmt.Sscanf(sc.Text(), "child %d", &pid)
	}
	if pid == 0 {
		_ = helper.Process.Kill()
		_ = helper.Wait()
		t.Fatal("the helper test binary started no child")
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	require.NoError(t, helper.Process.Kill())
	_ = helper.Wait()
	require.Eventually(t, func() bool { return !running(pid) }, 10*time.Second, 20*time.Millisecond,
		"the child (pid %d) outlived the test binary that started it", pid)
}

// running says whether pid is a live process (not gone, not a zombie
// waiting to be reaped).
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')') // the state follows "(comm) "
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}
