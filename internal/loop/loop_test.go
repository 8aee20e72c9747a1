package loop_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/loop"
)

// fakeTicker is a Ticker whose ticks the test sends.
type fakeTicker struct {
	c       chan time.Time
	every   time.Duration
	stopped chan struct{}
}

func (f *fakeTicker) C() <-chan time.Time { return f.c }
func (f *fakeTicker) Stop()               { close(f.stopped) }

// injected returns a Loop whose ticker the returned channel receives.
func injected() (*loop.Loop, <-chan *fakeTicker) {
	made := make(chan *fakeTicker, 1)
	l := &loop.Loop{NewTicker: func(d time.Duration) loop.Ticker {
		f := &fakeTicker{c: make(chan time.Time), every: d, stopped: make(chan struct{})}
		made <- f
		return f
	}}
	return l, made
}

// TestRunsAtEachTick: the task runs once per tick, in order, with the
// interval given to Start; Stop ends the loop, stops its ticker, and a
// second Start does nothing.
func TestRunsAtEachTick(t *testing.T) {
	t.Parallel()
	l, made := injected()
	ran := make(chan int)
	n := 0
	if !l.Start(time.Minute, func(context.Context) bool { n++; ran <- n; return true }) {
		t.Fatal("the first Start did not start")
	}
	f := <-made
	if f.every != time.Minute {
		t.Errorf("ticker every %v, want 1m", f.every)
	}
	for want := 1; want <= 3; want++ {
		f.c <- time.Now()
		if got := <-ran; got != want {
			t.Fatalf("run %d, want %d", got, want)
		}
	}
	if l.Start(time.Second, func(context.Context) bool { t.Error("a second task ran"); return true }) {
		t.Error("a second Start started")
	}
	l.Stop()
	<-f.stopped
	<-l.Done()
	l.Stop() // again: nothing
	if l.Start(time.Second, func(context.Context) bool { return true }) {
		t.Error("Start after Stop started")
	}
}

// TestStopWaitsForTask: Stop cancels the context of the task in progress
// and returns only once it has returned.
func TestStopWaitsForTask(t *testing.T) {
	t.Parallel()
	l, made := injected()
	inTask, finished := make(chan struct{}), make(chan struct{})
	l.Start(time.Second, func(ctx context.Context) bool {
		close(inTask)
		<-ctx.Done() // a network call giving up at Stop
		close(finished)
		return true
	})
	f := <-made
	f.c <- time.Now()
	<-inTask
	l.Stop()
	select {
	case <-finished:
	default:
		t.Fatal("Stop returned before the task in progress")
	}
}

// TestTaskEndsLoop: a task returning false is the last run; Stop after
// it returns at once.
func TestTaskEndsLoop(t *testing.T) {
	t.Parallel()
	l, made := injected()
	l.Start(time.Second, func(context.Context) bool { return false })
	f := <-made
	f.c <- time.Now()
	<-l.Done()
	<-f.stopped
	l.Stop()
}

// TestStopUnstarted: Stop of a loop never started returns at once, and
// the loop never starts after it; Done is nil.
func TestStopUnstarted(t *testing.T) {
	t.Parallel()
	var l loop.Loop
	l.Stop()
	if l.Done() != nil {
		t.Error("Done of a loop never started is not nil")
	}
	if l.Start(time.Second, func(context.Context) bool { return true }) {
		t.Error("Start after Stop started")
	}
}

// TestProcessClock: the zero Loop ticks on the process clock.
func TestProcessClock(t *testing.T) {
	t.Parallel()
	var l loop.Loop
	ran := make(chan struct{})
	l.Start(time.Millisecond, func(context.Context) bool { close(ran); return false })
	<-ran
	<-l.Done()
	l.Stop()
}
