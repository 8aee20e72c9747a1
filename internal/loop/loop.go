// Package loop runs periodic work: a task every interval on a goroutine
// of its own, started once, stopped and waited for. Every background
// loop of Floodgate (sweepers, watchers of files, retries) is a Loop, so
// each starts, stops and is tested the same way: a test injects a Ticker
// whose channel it drives, and never sleeps.
package loop

import (
	"context"
	"sync"
	"time"
)

// Ticker is what a Loop waits on between two runs of its task: a
// channel that receives a time at each tick, and Stop.
type Ticker interface {
	C() <-chan time.Time
	Stop()
}

// timeTicker is a time.Ticker as a Ticker.
type timeTicker struct{ t *time.Ticker }

func (t timeTicker) C() <-chan time.Time { return t.t.C }
func (t timeTicker) Stop()               { t.t.Stop() }

// NewTicker is a Ticker of the process clock, ticking every d (d > 0),
// as time.NewTicker: Loop.NewTicker's default.
func NewTicker(d time.Duration) Ticker { return timeTicker{time.NewTicker(d)} }

// Loop runs a task every interval on a goroutine of its own, from Start
// until Stop, or until the task says it is done. The zero value is ready
// to use; a Loop runs at most once (a Start after the first, or after
// Stop, does nothing). It is safe for concurrent use, but its task must
// not call Stop (Stop waits for the task).
type Loop struct {
	// NewTicker, if set, makes the Ticker the loop waits on, ticking
	// every interval given to Start: a test's, whose channel the test
	// drives. Nil is NewTicker, the process clock. Set it before Start.
	NewTicker func(d time.Duration) Ticker

	mu      sync.Mutex
	started bool
	stopped bool
	stop    chan struct{} // closed by Stop
	done    chan struct{} // closed when the goroutine returns
}

// Start runs task at every tick of a Ticker of interval every, on a
// goroutine of its own, until Stop or until task returns false. task's
// context ends when Stop is called, so that a task in progress (a
// network call) can give up. Only the first call starts anything, and
// none after Stop; Start reports whether this call started the loop.
func (l *Loop) Start(every time.Duration, task func(ctx context.Context) (again bool)) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.started || l.stopped {
		return false
	}
	l.started = true
	l.stop, l.done = make(chan struct{}), make(chan struct{})
	newTicker := l.NewTicker
	if newTicker == nil {
		newTicker = NewTicker
	}
	t := newTicker(every)
	go l.run(t, task)
	return true
}

func (l *Loop) run(t Ticker, task func(ctx context.Context) bool) {
	defer close(l.done)
	defer t.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-l.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C():
			select {
			case <-l.stop: // a tick and Stop at once: Stop wins
				return
			default:
			}
			if !task(ctx) {
				return
			}
		}
	}
}

// Stop stops the loop and waits for its task in progress, if it
// started; no task starts after Stop returns. Later calls do nothing
// but wait the same way.
func (l *Loop) Stop() {
	l.mu.Lock()
	if l.started && !l.stopped {
		close(l.stop)
	}
	l.stopped = true
	done := l.done
	l.mu.Unlock()
	if done != nil {
		<-done
	}
}

// Done is closed once the loop has ended (Stop, or its task returned
// false), or nil if it never started.
func (l *Loop) Done() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.done
}
