package linearize

import (
	"sync/atomic"
	"time"
)

// TickClock is a floodgate.Clock that moves forward by Step every time it
// is read, from Start: a store as fast as memstore then sees its windows
// roll over within a short history, without a test waiting for real time.
// It is safe for concurrent use.
type TickClock struct {
	Start time.Time
	Step  time.Duration
	n     atomic.Int64
}

// Now returns Start plus Step times the number of earlier calls.
func (c *TickClock) Now() time.Time {
	return c.Start.Add(time.Duration(c.n.Add(1)-1) * c.Step)
}
