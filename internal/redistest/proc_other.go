//go:build !linux

package redistest

import "syscall"

// sysProcAttr returns nil: only Linux has a parent-death signal, so
// elsewhere the processes are stopped by t.Cleanup alone.
func sysProcAttr() *syscall.SysProcAttr {
	return nil
}
