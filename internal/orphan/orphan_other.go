//go:build !linux

package orphan

import "os/exec"

// DieWithParent leaves cmd as it is where the kernel has no parent-death
// signal: a killed parent may leave its child running there.
func DieWithParent(cmd *exec.Cmd) *exec.Cmd { return cmd }
