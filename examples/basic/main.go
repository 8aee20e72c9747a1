// Command basic is a small HTTP API limited per client IP address with
// middleware/httplimit on the embedded memory store.
//
//	go run ./examples/basic
//	curl -i http://127.0.0.1:8080/hello   # six times: the sixth is 429
//
// Each client address may make -limit requests per -period (5 per 10
// seconds by default), counted from its first request. /healthz is never
// limited. Behind a reverse proxy, name it with -trust so that the client
// address is read from X-Forwarded-For:
//
//	go run ./examples/basic -trust 10.0.0.0/8
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/middleware/httplimit"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "basic:", err)
		os.Exit(1)
	}
}

// run serves until ctx is done. It prints the address it listens on first.
func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("basic", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8080", "address to listen on")
	limit := fs.Int64("limit", 5, "requests per period per client address")
	period := fs.Duration("period", 10*time.Second, "the period")
	trust := fs.String("trust", "", "comma-separated CIDRs of trusted reverse proxies (empty: none)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var proxies []netip.Prefix
	for s := range strings.SplitSeq(*trust, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return fmt.Errorf("-trust: %w", err)
		}
		proxies = append(proxies, p)
	}

	store := memstore.New(nil)
	defer store.Close()
	limiter, err := floodgate.New(store, nil)
	if err != nil {
		return err
	}
	mw, err := httplimit.New(httplimit.Config{
		Limiter: limiter,
		Limits:  []floodgate.Limit{{Name: "per-client", Limit: *limit, Period: *period, Window: floodgate.FirstHit}},
		Key:     httplimit.ClientIP{TrustedProxies: proxies}.Key,
		Skip:    func(r *http.Request) bool { return r.URL.Path == "/healthz" },
	})
	if err != nil {
		return err
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, r *http.Request) {
		res, _ := httplimit.FromContext(r.Context())
		fmt.Fprintf(w, "hello, %s: %d left\n", res.Key, res.Decision.Remaining)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mw.Handler(mux), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "listening on http://%s (%d requests per %v per client)\n", ln.Addr(), *limit, *period)
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
