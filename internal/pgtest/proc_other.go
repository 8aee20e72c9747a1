//go:build unix && !linux

package pgtest

import "syscall"

// sysProcAttr runs the process as cred when cred is not nil. Only Linux
// has a parent-death signal, so elsewhere the server is stopped by Main
// alone.
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	if cred == nil {
		return nil
	}
	return &syscall.SysProcAttr{Credential: cred}
}
