package crashtest

import (
	"os/exec"
	"syscall"
)

// setDeathSignal makes the kernel kill the server if the test process dies
// first (a panic, a go test timeout), so no server outlives the test.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
