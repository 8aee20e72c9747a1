//go:build unix

package main

import "syscall"

// fileLimit is the process's limit of open files (the soft
// RLIMIT_NOFILE, which Go raised to the hard limit at start), or 0 if it
// cannot be read.
func fileLimit() uint64 {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil || r.Cur >= 1<<62 { // RLIM_INFINITY: no limit to derive from
		return 0
	}
	return uint64(r.Cur)
}
