package serveproc

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal has the kernel send the child SIGTERM if this
// process dies without stopping it (SIGKILL, a crash), so no server is
// orphaned.
func setParentDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
