package memstore

import (
	"syscall"
	"time"
)

// systemMicros is time.Now().UnixMicro(): gettimeofday reads the same
// CLOCK_REALTIME in whole microseconds through the vDSO, in one call where
// time.Now makes two (it also reads the monotonic clock, which the store
// does not use).
func systemMicros() int64 {
	var tv syscall.Timeval
	if err := syscall.Gettimeofday(&tv); err != nil {
		return time.Now().UnixMicro()
	}
	return tv.Sec*1_000_000 + tv.Usec
}
