//go:build unix

package ui

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time this process has used, user and system, as in
// store/memstore's benchmarks: on a shared machine the wall time per
// operation counts the time other processes held the CPU; the CPU time
// much less so.
func cpuTime() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
