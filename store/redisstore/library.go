package redisstore

import (
	"context"
	"sync/atomic"
)

// maxLoads is the most times one call loads the library (or waits for
// another call's load) before it returns "Function not found": more than
// one, for a FUNCTION FLUSH that comes between a load and the call again.
const maxLoads = 3

// libLoader loads the function library (Options.Functions) for a runner,
// one load at a time: the calls that found their function missing while a
// load ran use that load.
type libLoader struct {
	sem chan struct{} // a token held while loading
	gen atomic.Uint64 // loads done
}

func newLibLoader() *libLoader { return &libLoader{sem: make(chan struct{}, 1)} }

// load loads the library unless a load finished since gen (the loads done
// when the caller's failed call began).
func (l *libLoader) load(ctx context.Context, c Conn, gen uint64) error {
	select {
	case l.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-l.sem }()
	if l.gen.Load() != gen {
		return nil
	}
	if err := c.LoadLibrary(ctx, scripts.lib.src); err != nil {
		return err
	}
	l.gen.Add(1)
	return nil
}
