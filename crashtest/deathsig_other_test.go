//go:build !linux

package crashtest

import "os/exec"

// setDeathSignal: only Linux has a parent-death signal; elsewhere the
// test's cleanup alone kills the server.
func setDeathSignal(*exec.Cmd) {}
