package memstore

import (
	"testing"
	"time"
)

// TestSystemMicros checks that systemMicros reads the clock time.Now reads,
// in the same whole microseconds: it falls between two readings of
// time.Now().UnixMicro() taken around it.
func TestSystemMicros(t *testing.T) {
	for range 1000 {
		before := time.Now().UnixMicro()
		got := systemMicros()
		after := time.Now().UnixMicro()
		if got < before || got > after {
			t.Fatalf("systemMicros() = %d, not within time.Now's %d to %d", got, before, after)
		}
	}
}
