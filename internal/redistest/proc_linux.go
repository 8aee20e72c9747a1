package redistest

import "syscall"

// sysProcAttr makes the kernel kill redis-server when the test binary dies,
// even by SIGKILL or a crash, so no server outlives its test. The signal is
// tied to the thread that started the process; the Go runtime does not end
// that thread while the process runs, because no goroutine here locks it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
