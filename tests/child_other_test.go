//go:build !linux

package tests

import "os/exec"

// dieWithTest leaves cmd as it is where the kernel has no parent-death
// signal: a killed test binary may leave its ragsync running there.
func dieWithTest(cmd *exec.Cmd) *exec.Cmd { return cmd }
