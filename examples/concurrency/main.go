// Command concurrency limits how many requests each user has in flight at
// once, with leases of a floodgate.Concurrency limit, rather than how many
// they make per second.
//
//	go run ./examples/concurrency
//	curl -H 'X-User: alice' 'http://127.0.0.1:8080/export?work=10s' &   # twice: both run
//	curl -i -H 'X-User: alice' http://127.0.0.1:8080/export              # a third: 429
//
// A request takes a lease when it starts and gives it back when it ends,
// however it ends (finished, or the client went away). If the process dies
// holding leases, they expire after -lease-ttl, so a crash never locks a
// user out for good. On the memory store the limit is per process; on a
// shared store (Redis) it holds across every instance.
//
// httplimit does not take Concurrency limits, because a lease must be held
// for the whole request rather than decided at its start; this example
// shows the few lines that do it, reusing httplimit's problem answers and
// the RateLimit fields of ratelimitheader ("qu" says the quota counts
// concurrent requests).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/middleware/httplimit"
	"github.com/floodgate-rl/floodgate/ratelimitheader"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "concurrency:", err)
		os.Exit(1)
	}
}

// run serves until ctx is done. It prints the address it listens on first.
func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("concurrency", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8080", "address to listen on")
	maxInFlight := fs.Int64("max", 2, "requests each user may have in flight at once")
	ttl := fs.Duration("lease-ttl", time.Minute, "how long a lease outlives a process that died holding it")
	work := fs.Duration("work", 2*time.Second, "how long an export takes, unless ?work= says otherwise")
	if err := fs.Parse(args); err != nil {
		return err
	}

	store := memstore.New(nil)
	defer store.Close()
	limiter, err := floodgate.New(store, nil)
	if err != nil {
		return err
	}
	limit := floodgate.Limit{Name: "in-flight", Algorithm: floodgate.Concurrency, Limit: *maxInFlight, Period: *ttl}
	if err := limit.Validate(); err != nil {
		return err
	}

	mux := http.NewServeMux()
	mux.Handle("GET /export", limitInFlight(limiter, limit, exportHandler(*work)))

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		// Requests in flight end, and give their leases back, on shutdown.
		BaseContext: func(net.Listener) context.Context { return ctx },
	}
	fmt.Fprintf(stdout, "listening on http://%s (%d requests in flight per user)\n", ln.Addr(), *maxInFlight)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(shutdown)
}

// limitInFlight lets each user (the X-User header) have at most
// limit.Limit requests in next at once.
func limitInFlight(limiter *floodgate.Limiter, limit floodgate.Limit, next http.Handler) http.Handler {
	limits := []floodgate.Limit{limit}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user := r.Header.Get("X-User") // a real server takes it from authentication
		if user == "" {
			httplimit.WriteDenied(w, r, httplimit.Result{Limits: limits, Err: httplimit.ErrMissingKey})
			return
		}
		res := httplimit.Result{Key: "user:" + user, Limits: limits}
		var lease *floodgate.Lease
		lease, res.Decision, res.Err = limiter.Acquire(r.Context(), res.Key, limit)
		if res.Err == nil {
			res.Decisions = []floodgate.Decision{res.Decision}
		}
		ratelimitheader.SetEach(w.Header(), limits, res.Decisions, nil)
		if lease == nil {
			httplimit.WriteDenied(w, r, res) // 429, or 503 if the store failed closed
			return
		}
		// The request's context is done when the client goes away, but the
		// lease must still be given back.
		defer lease.Release(context.WithoutCancel(r.Context()))
		next.ServeHTTP(w, r)
	})
}

// exportHandler stands for slow work: it says it started, works for the
// duration in ?work= (or def), and says it is done. It stops early if the
// client goes away.
func exportHandler(def time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d := def
		if s := r.URL.Query().Get("work"); s != "" {
			var err error
			if d, err = time.ParseDuration(s); err != nil || d < 0 {
				http.Error(w, "work: want a duration such as 2s", http.StatusBadRequest)
				return
			}
		}
		io.WriteString(w, "started\n")
		http.NewResponseController(w).Flush()
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			io.WriteString(w, "done\n")
		case <-r.Context().Done():
		}
	})
}
