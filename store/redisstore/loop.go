package redisstore

import (
	"context"
	"sync"
	"time"
)

// A loop runs a task every interval on a goroutine of its own, from its
// first start until stop, which waits for it: the sweepers of the holds,
// of the local budgets and of the rate slices. Its zero value is not
// usable: make one with newLoop.
type loop struct {
	once    sync.Once
	started bool // set by once when it started the goroutine
	stop    chan struct{}
	done    chan struct{}
}

func newLoop() *loop { return &loop{stop: make(chan struct{}), done: make(chan struct{})} }

// start runs tick every interval from now on, once: later calls do
// nothing, and so do calls after stop. tick's context ends at stop.
func (l *loop) start(every time.Duration, tick func(ctx context.Context)) {
	l.once.Do(func() {
		l.started = true
		go l.run(every, tick)
	})
}

func (l *loop) run(every time.Duration, tick func(ctx context.Context)) {
	defer close(l.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-l.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			tick(ctx)
		}
	}
}

// halt stops the loop and waits for its tick in progress, if it started.
// It is called once.
func (l *loop) halt() {
	l.once.Do(func() {})
	close(l.stop)
	if l.started {
		<-l.done
	}
}
