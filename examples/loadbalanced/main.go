// Command loadbalanced shows the problem Floodgate exists for: three
// instances of an API behind a round-robin load balancer, each limiting a
// client to 10 requests a minute.
//
//	go run ./examples/loadbalanced                  # -store=memory
//	go run ./examples/loadbalanced -store=redis -redis-url redis://127.0.0.1:6379
//
// Everything runs in this process on loopback ports: the instances (each
// an http.Server behind middleware/httplimit, keyed by an API key), a tiny
// reverse proxy (httputil.ReverseProxy) that sends each request to the
// next instance in turn, and a client that sends its requests through the
// proxy and prints what got through.
//
// With -store=memory every instance counts in its own memory and sees only
// a third of the traffic, so the client gets three times its limit. With
// -store=redis the instances share one budget in Redis, decided atomically
// by a Lua script, and the limit holds exactly.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/middleware/httplimit"
	"github.com/floodgate-rl/floodgate/store/memstore"
	"github.com/floodgate-rl/floodgate/store/redisstore"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "loadbalanced:", err)
		os.Exit(1)
	}
}

// config is what the flags say.
type config struct {
	store     string // "memory" or "redis"
	redisURL  string
	instances int
	limit     int64
	period    time.Duration
	requests  int
}

// result is what the client saw, per instance.
type result struct {
	requests []int // sent to each instance
	allowed  []int // let through by each instance
}

func (r result) total() (sent, allowed int) {
	for i := range r.requests {
		sent += r.requests[i]
		allowed += r.allowed[i]
	}
	return sent, allowed
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("loadbalanced", flag.ContinueOnError)
	var c config
	fs.StringVar(&c.store, "store", "memory", "where the instances count: memory (each its own) or redis (shared)")
	fs.StringVar(&c.redisURL, "redis-url", "redis://127.0.0.1:6379", "the Redis server of -store=redis")
	fs.IntVar(&c.instances, "instances", 3, "instances behind the load balancer (1 to 16)")
	fs.Int64Var(&c.limit, "limit", 10, "requests per period for the client")
	fs.DurationVar(&c.period, "period", time.Minute, "the period")
	fs.IntVar(&c.requests, "requests", 0, "requests the client sends (0: (instances+1) × limit, at most 10000)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if c.instances < 1 || c.instances > 16 {
		return fmt.Errorf("-instances %d: want 1 to 16", c.instances)
	}
	if c.requests == 0 {
		c.requests = int(min(int64(c.instances+1)*c.limit, 10000))
	}
	if c.requests < 0 || c.requests > 10000 {
		return fmt.Errorf("-requests %d: want 1 to 10000", c.requests)
	}
	res, err := demo(ctx, c)
	if err != nil {
		return err
	}
	report(stdout, c, res)
	return nil
}

// demo starts the instances and the proxy, sends the client's requests
// through it, stops everything, and returns what got through.
func demo(ctx context.Context, c config) (result, error) {
	limit := floodgate.Limit{Name: "per-client", Algorithm: floodgate.SlidingWindowLog, Limit: c.limit, Period: c.period}
	if err := limit.Validate(); err != nil {
		return result{}, err
	}
	// Keys of this run only, so that runs against one Redis do not meet.
	var id [4]byte
	rand.Read(id[:])
	prefix := "loadbalanced:" + hex.EncodeToString(id[:]) + ":"

	res := result{requests: make([]int, c.instances), allowed: make([]int, c.instances)}
	requests := make([]atomic.Int64, c.instances)
	allowed := make([]atomic.Int64, c.instances)
	var backends []*url.URL
	var servers []*http.Server
	defer func() {
		for _, s := range servers {
			s.Close()
		}
	}()
	for i := range c.instances {
		store, err := openStore(ctx, c)
		if err != nil {
			return result{}, err
		}
		if cl, ok := store.(floodgate.Closer); ok {
			defer cl.Close()
		}
		limiter, err := floodgate.New(store, &floodgate.Options{Timeout: time.Second})
		if err != nil {
			return result{}, err
		}
		mw, err := httplimit.New(httplimit.Config{
			Limiter:   limiter,
			Limits:    []floodgate.Limit{limit},
			Key:       httplimit.Header("X-Api-Key"),
			KeyPrefix: prefix,
		})
		if err != nil {
			return result{}, err
		}
		api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			allowed[i].Add(1)
			fmt.Fprintf(w, "hello from instance %d\n", i+1)
		})
		limited := mw.Handler(api)
		srv, u, err := listen(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			requests[i].Add(1)
			limited.ServeHTTP(w, r)
		}))
		if err != nil {
			return result{}, err
		}
		servers, backends = append(servers, srv), append(backends, u)
	}

	var next atomic.Uint64
	lb, lbURL, err := listen(&httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.SetURL(backends[(next.Add(1)-1)%uint64(len(backends))])
		pr.SetXForwarded()
	}})
	if err != nil {
		return result{}, err
	}
	servers = append(servers, lb)

	client := &http.Client{Timeout: 10 * time.Second}
	for range c.requests {
		req, err := http.NewRequestWithContext(ctx, "GET", lbURL.String()+"/hello", nil)
		if err != nil {
			return result{}, err
		}
		req.Header.Set("X-Api-Key", "the-client's-key")
		resp, err := client.Do(req)
		if err != nil {
			return result{}, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK, http.StatusTooManyRequests:
		default:
			return result{}, fmt.Errorf("the load balancer answered %s", resp.Status)
		}
	}
	for i := range c.instances {
		res.requests[i], res.allowed[i] = int(requests[i].Load()), int(allowed[i].Load())
	}
	return res, nil
}

// openStore returns the store of one instance: its own memory store, or a
// connection to the shared Redis.
func openStore(ctx context.Context, c config) (floodgate.Store, error) {
	switch c.store {
	case "memory":
		return memstore.New(nil), nil
	case "redis":
		// Each instance opens its own connection, as separate processes
		// would; the budget is shared because the state is in Redis.
		return redisstore.Open(ctx, c.redisURL, &redisstore.Options{Prefix: "loadbalanced"})
	}
	return nil, fmt.Errorf("-store %q: want memory or redis", c.store)
}

// listen serves h on a free loopback port.
func listen(h http.Handler) (*http.Server, *url.URL, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	return srv, &url.URL{Scheme: "http", Host: ln.Addr().String()}, nil
}

func report(w io.Writer, c config, res result) {
	fmt.Fprintf(w, "store: %s, %d instances behind a round-robin load balancer\n", c.store, c.instances)
	fmt.Fprintf(w, "limit: %d requests per %v for the client (%s)\n\n", c.limit, c.period, floodgate.SlidingWindowLog)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "instance\trequests\tallowed\tdenied\t")
	for i := range res.requests {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t\n", i+1, res.requests[i], res.allowed[i], res.requests[i]-res.allowed[i])
	}
	sent, allowed := res.total()
	fmt.Fprintf(tw, "total\t%d\t%d\t%d\t\n", sent, allowed, sent-allowed)
	tw.Flush()
	fmt.Fprintln(w)
	switch {
	case int64(allowed) > c.limit:
		fmt.Fprintf(w, "The client got %d requests through: %.1f times its limit of %d.\n", allowed, float64(allowed)/float64(c.limit), c.limit)
		fmt.Fprintln(w, "Each instance counted only what it saw. Run with -store=redis to share one budget.")
	default:
		fmt.Fprintf(w, "The limit held: %d of %d requests got through, for a limit of %d.\n", allowed, sent, c.limit)
	}
}
