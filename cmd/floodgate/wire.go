package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/server"
	"github.com/floodgate-rl/floodgate/server/envoyrls"
	"github.com/floodgate-rl/floodgate/store/redisstore"
	"google.golang.org/grpc"
)

// openRedis opens a Redis store that serve owns and closes, with the
// options serve's flags set (DenyCache, Functions).
func openRedis(ctx context.Context, url string, o redisstore.Options) (floodgate.Store, func(), error) {
	s, err := redisstore.Open(ctx, url, &o)
	if err != nil {
		return nil, nil, err
	}
	return s, func() { s.Close() }, nil
}

// envoyService is Envoy's rate limit service over srv; headers says
// whether its answers carry response headers, p which ones, and whether
// dynamic metadata.
func envoyService(srv *server.Server, headers bool, p parityFlags) *envoyrls.Service {
	return envoyrls.New(srv, p.envoyOptions(headers))
}

// registerGRPC serves Envoy's rate limit service.
func registerGRPC(g *grpc.Server, rls *envoyrls.Service) {
	rlsv3.RegisterRateLimitServiceServer(g, rls)
}

// httpExtras are the HTTP endpoints of other packages: envoyproxy/ratelimit's
// POST /json.
func httpExtras(rls *envoyrls.Service) map[string]http.Handler {
	return map[string]http.Handler{"POST /json": rls.JSONHandler()}
}

// pendingRedis is the Redis store of a serve that started while Redis was
// unreachable: until a background goroutine has opened the store (it
// tries every retryEvery), every call fails with errNotConnected, which
// each rule's failure mode answers as it answers any store failure, and
// /readyz says the store is unreachable; then every call goes to the
// store. So a fleet can start before its Redis, and fail_open, fail_closed
// and local behave as they would if Redis had gone down later.
type pendingRedis struct {
	store   atomic.Pointer[redisstore.Store]
	lastErr atomic.Pointer[error]
	stop    chan struct{}
	done    chan struct{}
}

var (
	_ floodgate.Store     = (*pendingRedis)(nil)
	_ floodgate.Resetter  = (*pendingRedis)(nil)
	_ floodgate.Batcher   = (*pendingRedis)(nil)
	_ floodgate.Pipeliner = (*pendingRedis)(nil)
	_ floodgate.Reserver  = (*pendingRedis)(nil)
	_ floodgate.Raiser    = (*pendingRedis)(nil)
	_ floodgate.Pinger    = (*pendingRedis)(nil)
)

// retryEvery is how often a pendingRedis tries to open the store.
const retryEvery = time.Second

// openPending starts trying to open the store of url every retryEvery,
// first has the error of the attempt that just failed; log hears of the
// connection, and once of each error that waiting will not cure (a Redis
// that now answers but refuses the password, or a certificate), which
// /readyz and every failed decision report too.
func openPending(url string, o redisstore.Options, first error, log *slog.Logger) *pendingRedis {
	p := &pendingRedis{stop: make(chan struct{}), done: make(chan struct{})}
	p.lastErr.Store(&first)
	go func() {
		var logged string
		defer close(p.done)
		t := time.NewTicker(retryEvery)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), retryEvery)
			s, err := redisstore.Open(ctx, url, &o)
			cancel()
			if err != nil {
				p.lastErr.Store(&err)
				if msg := err.Error(); !retryable(err) && msg != logged {
					logged = msg
					log.Error("store reachable but not opened; still retrying", "store", redactURL(url), "every", retryEvery, "error", msg)
				}
				continue
			}
			p.store.Store(s)
			log.Info("store connected", "store", redactURL(url))
			return
		}
	}()
	return p
}

// retryable reports whether err of redisstore.Open means Redis could not
// be reached (nothing listens, or no answer in time: worth retrying),
// rather than a mistake in the flags (a bad URL, a certificate, a
// password), which stops serve at start as before.
func retryable(err error) bool {
	if errors.Is(err, redisstore.ErrClientCertificate) || errors.Is(err, redisstore.ErrBadURL) {
		return false
	}
	var ne net.Error
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// get is the store once open, or errNotConnected with the last error.
func (p *pendingRedis) get() (*redisstore.Store, error) {
	if s := p.store.Load(); s != nil {
		return s, nil
	}
	return nil, fmt.Errorf("%w: Redis not connected yet (retrying every %v): %w", floodgate.ErrStore, retryEvery, *p.lastErr.Load())
}

func (p *pendingRedis) Apply(ctx context.Context, r floodgate.Request) (floodgate.Decision, error) {
	s, err := p.get()
	if err != nil {
		return floodgate.Decision{}, err
	}
	return s.Apply(ctx, r)
}

func (p *pendingRedis) ApplyBatch(ctx context.Context, rs []floodgate.Request) ([]floodgate.Decision, error) {
	s, err := p.get()
	if err != nil {
		return nil, err
	}
	return s.ApplyBatch(ctx, rs)
}

func (p *pendingRedis) ApplyPipelined(ctx context.Context, rs []floodgate.Request) ([]floodgate.Decision, []error) {
	s, err := p.get()
	if err != nil {
		errs := make([]error, len(rs))
		for i := range errs {
			errs[i] = err
		}
		return make([]floodgate.Decision, len(rs)), errs
	}
	return s.ApplyPipelined(ctx, rs)
}

func (p *pendingRedis) Reset(ctx context.Context, key string, limit floodgate.Limit) error {
	s, err := p.get()
	if err != nil {
		return err
	}
	return s.Reset(ctx, key, limit)
}

func (p *pendingRedis) Reserve(ctx context.Context, r floodgate.HoldRequest) (floodgate.HoldResult, error) {
	s, err := p.get()
	if err != nil {
		return floodgate.HoldResult{}, err
	}
	return s.Reserve(ctx, r)
}

func (p *pendingRedis) Settle(ctx context.Context, r floodgate.SettleRequest) ([]floodgate.Settlement, error) {
	s, err := p.get()
	if err != nil {
		return nil, err
	}
	return s.Settle(ctx, r)
}

func (p *pendingRedis) Raise(ctx context.Context, r floodgate.Request, window time.Time) (floodgate.Decision, error) {
	s, err := p.get()
	if err != nil {
		return floodgate.Decision{}, err
	}
	return s.Raise(ctx, r, window)
}

func (p *pendingRedis) Ping(ctx context.Context) error {
	s, err := p.get()
	if err != nil {
		return err
	}
	return s.Ping(ctx)
}

// Close stops the retries and closes the store, if it was opened.
func (p *pendingRedis) Close() error {
	close(p.stop)
	<-p.done
	if s := p.store.Load(); s != nil {
		return s.Close()
	}
	return nil
}
