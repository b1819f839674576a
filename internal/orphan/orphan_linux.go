package orphan

import (
	"os/exec"
	"syscall"
)

// DieWithParent has the kernel kill cmd's process (SIGKILL) when the
// process that started it exits, however it exits. Call it before Start.
func DieWithParent(cmd *exec.Cmd) *exec.Cmd {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	return cmd
}
