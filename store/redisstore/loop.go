package redisstore

import (
	"context"
	"time"

	iloop "github.com/floodgate-rl/floodgate/internal/loop"
)

// A loop runs a task every interval on a goroutine of its own, from its
// first start until halt, which waits for it: the sweepers of the holds,
// of the local budgets and of the rate slices. It is internal/loop's
// Loop, with the task its callers give, which never ends it. Make one
// with newLoop.
type loop struct{ l iloop.Loop }

func newLoop() *loop { return new(loop) }

// start runs tick every interval from now on, once: later calls do
// nothing, and so do calls after halt. tick's context ends at halt.
func (l *loop) start(every time.Duration, tick func(ctx context.Context)) {
	l.l.Start(every, func(ctx context.Context) bool {
		tick(ctx)
		return true
	})
}

// halt stops the loop and waits for its tick in progress, if it started.
func (l *loop) halt() { l.l.Stop() }
