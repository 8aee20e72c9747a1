package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/floodgate-rl/floodgate"
	iloop "github.com/floodgate-rl/floodgate/internal/loop"
)

// DefaultRetryEvery is PendingOptions.RetryEvery's default.
const DefaultRetryEvery = time.Second

// PendingOptions configure OpenPending. A nil *PendingOptions, or the
// zero value, is every default.
type PendingOptions struct {
	// RetryEvery is how often Open is tried, and the deadline of each
	// try; default DefaultRetryEvery.
	RetryEvery time.Duration
	// OnError, if set, hears of the error of each failed try, on the
	// goroutine that tries; Retryable tells a Redis not reachable yet
	// from one that answers but refuses (a password, a certificate),
	// which waiting will not cure.
	OnError func(error)
	// OnOpen, if set, is called once, when the store is open.
	OnOpen func()
}

// Pending is a Redis store that serves before Redis can be reached: until
// a background goroutine has opened the Store (OpenPending), a call waits
// for the store to open, up to its deadline, and then fails with an
// error saying so, wrapping the last try's, which a Limiter's failure
// policy answers as it answers any store failure; a call without a
// deadline does not wait. Ping fails at once, so readiness says the
// store is unreachable. Once open, every call goes to the Store. So the
// first calls of a service that started while its Redis was coming up
// are decided by Redis if the dial completes within their deadline
// (a Limiter's Options.Timeout, through WithTimeout, or the caller's
// context), and a fleet can start before its Redis, fail_open,
// fail_closed and local behaving as they would if Redis had gone down
// later. It is safe for concurrent use.
type Pending struct {
	store   atomic.Pointer[Store]
	lastErr atomic.Pointer[error]
	every   time.Duration
	loop    iloop.Loop
	// opened is closed once store is set.
	opened chan struct{}
}

var (
	_ floodgate.Store     = (*Pending)(nil)
	_ floodgate.Resetter  = (*Pending)(nil)
	_ floodgate.Batcher   = (*Pending)(nil)
	_ floodgate.Pipeliner = (*Pending)(nil)
	_ floodgate.Reserver  = (*Pending)(nil)
	_ floodgate.Raiser    = (*Pending)(nil)
	_ floodgate.Pinger    = (*Pending)(nil)
)

// OpenPending starts trying to open the store of rawURL with opts (as
// Open) every po.RetryEvery, and returns at once; first is the error of
// the try that just failed, which calls report until the next try.
// Close stops the tries and closes the store, if it was opened. Most
// callers open with Open, and call OpenPending only when Retryable says
// Open's error is worth waiting out.
func OpenPending(rawURL string, opts *Options, first error, po *PendingOptions) *Pending {
	return openPending(rawURL, opts, first, po, nil)
}

// openPending is OpenPending, its tries paced by newTicker (nil: the
// process clock).
func openPending(rawURL string, opts *Options, first error, po *PendingOptions, newTicker func(time.Duration) iloop.Ticker) *Pending {
	var o PendingOptions
	if po != nil {
		o = *po
	}
	if o.RetryEvery <= 0 {
		o.RetryEvery = DefaultRetryEvery
	}
	var ropts *Options
	if opts != nil {
		c := *opts
		ropts = &c
	}
	p := &Pending{every: o.RetryEvery, opened: make(chan struct{})}
	p.lastErr.Store(&first)
	p.loop.NewTicker = newTicker
	p.loop.Start(o.RetryEvery, func(ctx context.Context) bool {
		ctx, cancel := context.WithTimeout(ctx, o.RetryEvery)
		s, err := Open(ctx, rawURL, ropts)
		cancel()
		if err != nil {
			p.lastErr.Store(&err)
			if o.OnError != nil {
				o.OnError(err)
			}
			return true
		}
		p.store.Store(s)
		close(p.opened)
		if o.OnOpen != nil {
			o.OnOpen()
		}
		return false
	})
	return p
}

// Retryable reports whether err of Open means Redis could not be reached
// (nothing listens, or no answer in time: worth retrying), rather than a
// mistake in the URL or the options (a bad URL, a certificate, a
// password).
func Retryable(err error) bool {
	if errors.Is(err, ErrClientCertificate) || errors.Is(err, ErrBadURL) {
		return false
	}
	var ne net.Error
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// Store returns the store once it is open, else nil.
func (p *Pending) Store() *Store { return p.store.Load() }

// get is the store once open, or the error of not being connected yet,
// wrapping the last try's. Until the store is open, it waits for it until
// ctx ends or, with a deadline carried for its scripts (WithTimeout),
// for that long: a call waits for the dial in progress within its
// deadline. Without either it does not wait.
func (p *Pending) get(ctx context.Context) (*Store, error) {
	if s := p.store.Load(); s != nil {
		return s, nil
	}
	_, bounded := ctx.Deadline()
	if d := sendTimeout(ctx); d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
		bounded = true
	}
	if bounded {
		select {
		case <-p.opened:
			return p.store.Load(), nil
		case <-ctx.Done():
		}
	}
	return nil, fmt.Errorf("%w: Redis not connected yet (retrying every %v): %w", floodgate.ErrStore, p.every, *p.lastErr.Load())
}

// WithTimeout returns p with timeout as a Limiter's deadline (see
// Store.WithTimeout): until the store is open, a call waits for it that
// long; once open, each script is bounded by it from its send.
func (p *Pending) WithTimeout(timeout time.Duration) floodgate.Store {
	return &pendingTimed{Pending: p, timeout: timeout}
}

// pendingTimed is Pending with a Limiter's deadline.
type pendingTimed struct {
	*Pending
	timeout time.Duration // never changed: its calls' contexts point to it
}

func (t *pendingTimed) ctx(ctx context.Context) context.Context {
	return withSendTimeout(ctx, &t.timeout)
}

func (t *pendingTimed) Apply(ctx context.Context, r floodgate.Request) (floodgate.Decision, error) {
	return t.Pending.Apply(t.ctx(ctx), r)
}

func (t *pendingTimed) ApplyBatch(ctx context.Context, rs []floodgate.Request) ([]floodgate.Decision, error) {
	return t.Pending.ApplyBatch(t.ctx(ctx), rs)
}

func (t *pendingTimed) ApplyPipelined(ctx context.Context, rs []floodgate.Request) ([]floodgate.Decision, []error) {
	return t.Pending.ApplyPipelined(t.ctx(ctx), rs)
}

func (t *pendingTimed) Reserve(ctx context.Context, r floodgate.HoldRequest) (floodgate.HoldResult, error) {
	return t.Pending.Reserve(t.ctx(ctx), r)
}

func (t *pendingTimed) Settle(ctx context.Context, r floodgate.SettleRequest) ([]floodgate.Settlement, error) {
	return t.Pending.Settle(t.ctx(ctx), r)
}

func (t *pendingTimed) Raise(ctx context.Context, r floodgate.Request, window time.Time) (floodgate.Decision, error) {
	return t.Pending.Raise(t.ctx(ctx), r, window)
}

func (t *pendingTimed) Reset(ctx context.Context, key string, limit floodgate.Limit) error {
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	return t.Pending.Reset(ctx, key, limit)
}

func (t *pendingTimed) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	return t.Pending.Ping(ctx)
}

func (t *pendingTimed) WithTimeout(timeout time.Duration) floodgate.Store {
	return t.Pending.WithTimeout(timeout)
}

// Apply is Store.Apply once the store is open.
func (p *Pending) Apply(ctx context.Context, r floodgate.Request) (floodgate.Decision, error) {
	s, err := p.get(ctx)
	if err != nil {
		return floodgate.Decision{}, err
	}
	return s.Apply(ctx, r)
}

// ApplyBatch is Store.ApplyBatch once the store is open.
func (p *Pending) ApplyBatch(ctx context.Context, rs []floodgate.Request) ([]floodgate.Decision, error) {
	s, err := p.get(ctx)
	if err != nil {
		return nil, err
	}
	return s.ApplyBatch(ctx, rs)
}

// ApplyPipelined is Store.ApplyPipelined once the store is open; until
// then each request has the error.
func (p *Pending) ApplyPipelined(ctx context.Context, rs []floodgate.Request) ([]floodgate.Decision, []error) {
	s, err := p.get(ctx)
	if err != nil {
		errs := make([]error, len(rs))
		for i := range errs {
			errs[i] = err
		}
		return make([]floodgate.Decision, len(rs)), errs
	}
	return s.ApplyPipelined(ctx, rs)
}

// Reset is Store.Reset once the store is open.
func (p *Pending) Reset(ctx context.Context, key string, limit floodgate.Limit) error {
	s, err := p.get(ctx)
	if err != nil {
		return err
	}
	return s.Reset(ctx, key, limit)
}

// Reserve is Store.Reserve once the store is open.
func (p *Pending) Reserve(ctx context.Context, r floodgate.HoldRequest) (floodgate.HoldResult, error) {
	s, err := p.get(ctx)
	if err != nil {
		return floodgate.HoldResult{}, err
	}
	return s.Reserve(ctx, r)
}

// Settle is Store.Settle once the store is open.
func (p *Pending) Settle(ctx context.Context, r floodgate.SettleRequest) ([]floodgate.Settlement, error) {
	s, err := p.get(ctx)
	if err != nil {
		return nil, err
	}
	return s.Settle(ctx, r)
}

// ReadHolds is Store.ReadHolds once the store is open.
func (p *Pending) ReadHolds(ctx context.Context, r floodgate.SettleRequest) ([]floodgate.HeldUnits, error) {
	s, err := p.get(ctx)
	if err != nil {
		return nil, err
	}
	return s.ReadHolds(ctx, r)
}

// Raise is Store.Raise once the store is open.
func (p *Pending) Raise(ctx context.Context, r floodgate.Request, window time.Time) (floodgate.Decision, error) {
	s, err := p.get(ctx)
	if err != nil {
		return floodgate.Decision{}, err
	}
	return s.Raise(ctx, r, window)
}

// Ping is Store.Ping once the store is open.
func (p *Pending) Ping(ctx context.Context) error {
	s, err := p.get(context.Background())
	if err != nil {
		return err
	}
	return s.Ping(ctx)
}

// Close stops the tries, waiting for one in progress (which it cancels),
// and closes the store, if it was opened.
func (p *Pending) Close() error {
	p.loop.Stop()
	if s := p.store.Load(); s != nil {
		return s.Close()
	}
	return nil
}
