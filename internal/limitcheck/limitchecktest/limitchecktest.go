// Package limitchecktest holds what the tests of middleware/httplimit and
// middleware/grpclimit share about limitcheck's waits: a timer the test
// drives. It is for tests only.
package limitchecktest

import (
	"testing"
	"time"
)

// Timer is the timer of a middleware's waits (its SetWaitTimer takes
// After): each wait's delay arrives on Asked as it starts, a send on Fire
// ends one, Stopped receives as each ends. Make it with NewTimer; it is
// safe for concurrent use.
type Timer struct {
	Asked   chan time.Duration
	Fire    chan time.Time
	Stopped chan struct{}
}

// NewTimer returns a Timer on which up to 16 waits can start, and end,
// before the test reads them.
func NewTimer() *Timer {
	return &Timer{Asked: make(chan time.Duration, 16), Fire: make(chan time.Time), Stopped: make(chan struct{}, 16)}
}

// After is the timer of one wait of d, in place of time.NewTimer's channel
// and stop (limitcheck.Checker.After).
func (w *Timer) After(d time.Duration) (<-chan time.Time, func() bool) {
	w.Asked <- d
	return w.Fire, func() bool { w.Stopped <- struct{}{}; return true }
}

// Next is the delay of the next wait that started, or fails t when none
// starts within 30 s (a bound on a hung test, not a synchronisation).
func (w *Timer) Next(t testing.TB) time.Duration {
	t.Helper()
	select {
	case d := <-w.Asked:
		return d
	case <-time.After(30 * time.Second):
		t.Fatal("no wait started")
		return 0
	}
}
