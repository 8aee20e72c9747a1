package pgtest

import "syscall"

// sysProcAttr makes the kernel kill the process when the test binary
// dies, even by SIGKILL or a crash, so no server outlives its tests (its
// backends exit when they see the postmaster gone), and runs it as cred
// when cred is not nil. The signal is tied to the thread that started the
// process; the Go runtime does not end that thread while the process
// runs, because no goroutine here locks it.
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Credential: cred}
}
