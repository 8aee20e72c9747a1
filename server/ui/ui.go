// Package ui is the live dashboard of `floodgate serve`, at /ui: what an
// operator asks during an incident, at a glance. Who is being limited
// right now (the top denied keys), which keys are close to their limits,
// the decisions per second of each domain and rule (allowed, denied,
// shadow-denied: what a shadow rule would block if it were enforced), the
// store's health (latency percentiles, errors, the failure modes'
// answers, the breaker of the failure mode local, the Redis store's deny
// cache and local budgets), concurrency leases, and the rules in force
// with their sources and last reload. An admin can inspect a key's state
// and reset it.
//
// The page is three embedded files (HTML, JavaScript, CSS) with its charts
// drawn in SVG by hand: nothing is fetched from another origin, nothing
// to install. It reads the feed, GET /ui/events: server-sent events, one
// Frame (JSON) per Options.Interval, a second by default, built once per
// interval for every stream of its scope (admin or not), so that a stream
// costs its connection and little else. The streams are capped in all
// and per client (Options.MaxSubscribers, MaxSubscribersPerPeer), and
// each frame must be sent within Options.WriteTimeout.
//
// # Where the figures come from
//
// Nothing here decides or re-counts what the server counts already.
// Rates per rule, latency percentiles, errors and failure-mode answers
// are differences between two readings of the server's own Prometheus
// registry (floodgate_decisions_total, floodgate_store_duration_seconds,
// ...), so the dashboard and /metrics always agree. What no metric can
// hold, because its labels would be per key, comes from a
// floodgate.Observer that the Dashboard adds to the server's Limiter
// (server.Server.Watch): every decision, from every protocol, goes
// through that one Limiter.
//
// The top lists come from Space-Saving sketches (internal/topk) of
// Options.Counters counters each, never a map per key: memory stays
// bounded whatever keys clients invent. Each listed count is the
// number of denials (or admissions near the limit) of the key in the
// last one to two Options.Slice, over by at most Err, and Err is at most
// N/k (N the decisions the sketches counted, k = Options.Counters): with
// k = 64 and 100,000 denials, every key denied more than 1,562 times is
// listed, and no count is more than 1,562 too high (the keys are split
// by a hash into 8 shards of k counters each, and the bound holds for
// each shard's own N, so it is usually far lower). The frame gives N and
// the bound; the page shows each count's ±Err.
//
// # Access
//
// The page and its files hold no data and need no token. The feed takes a
// client token when the server has client tokens (transport.ScopeClient);
// its top keys and rules only go to admin tokens (or to everyone on a
// server without token files), since a key is another client's state and
// the rules are GET /v1/config's. Inspecting and resetting a key are POST
// /v1/inspect and POST /v1/reset of the HTTP API, which need an admin
// token; the page sends the token the operator types in (kept in the
// tab's sessionStorage), and shows the 401 or 403 of a refusal.
package ui

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strconv"
	"sync"
	"time"

	"github.com/floodgate-rl/floodgate/internal/loop"
	"github.com/floodgate-rl/floodgate/server"
	"github.com/floodgate-rl/floodgate/server/httpapi"
	"github.com/floodgate-rl/floodgate/server/transport"
)

//go:embed assets
var assets embed.FS

// Dashboard serves the dashboard of one server. It is safe for
// concurrent use.
type Dashboard struct {
	srv  *server.Server
	opts Options
	rec  *recorder
	now  func() time.Time
	stop func() // ends the recorder's watch and its rotation
	// rotation drops the older sketches of the recorder every Slice.
	rotation loop.Loop
	// feed sends the frames of GET /ui/events; ticks makes them, every
	// Interval.
	feed  *feed
	ticks loop.Loop

	mu     sync.Mutex
	closed bool
	done   chan struct{} // closed by Close: every stream ends
}

// New returns the dashboard of srv and starts counting its decisions
// (server.Server.Watch). opts may be nil. Close stops it.
func New(srv *server.Server, opts *Options) *Dashboard {
	d := &Dashboard{srv: srv, opts: opts.withDefaults(), now: time.Now, done: make(chan struct{})}
	d.rec = newRecorder(d.opts)
	stopWatch := srv.Watch(d.rec)
	d.rotation.Start(d.opts.Slice, func(context.Context) bool {
		d.rec.rotate()
		return true
	})
	d.feed = newFeed(d)
	d.ticks.NewTicker = d.opts.newTicker
	d.ticks.Start(d.opts.Interval, d.feed.tick)
	d.stop = func() {
		stopWatch()
		d.rotation.Stop()
		d.ticks.Stop()
	}
	return d
}

// Close ends every stream of the feed, so that an HTTP server's Shutdown
// need not wait for them (register it with http.Server.RegisterOnShutdown),
// and stops counting decisions. It is safe to call more than once.
func (d *Dashboard) Close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.closed {
		d.closed = true
		close(d.done)
		d.stop()
	}
}

// scoped is a handler of Handlers with the scope it asks for.
type scoped struct {
	http.Handler
	scope transport.Scope
}

func (s scoped) Scope() transport.Scope { return s.scope }

// Handlers are the dashboard's routes, for httpapi.API.Handler's extras:
//
//	GET /ui           the page
//	GET /ui/{asset}   its script, style sheet and icon
//	GET /ui/events    the feed: server-sent events, one Frame a second
//	GET /, GET /ui/   redirect to /ui (302), where a person looks first
//
// The page and its files are transport.ScopeOpen, the feed
// transport.ScopeClient; the actions are the API's POST /v1/inspect and POST
// /v1/reset (transport.ScopeAdmin).
func (d *Dashboard) Handlers() map[string]http.Handler {
	return map[string]http.Handler{
		"GET /ui":         scoped{http.HandlerFunc(d.servePage), transport.ScopeOpen},
		"GET /ui/{asset}": scoped{http.HandlerFunc(d.serveAsset), transport.ScopeOpen},
		"GET /ui/events":  http.HandlerFunc(d.serveEvents),
		"GET /{$}":        scoped{http.HandlerFunc(toPage), transport.ScopeOpen},
		"GET /ui/{$}":     scoped{http.HandlerFunc(toPage), transport.ScopeOpen},
	}
}

// toPage redirects to the page, without a body: a person who opens the
// server's address, or /ui/ with a slash, finds the dashboard rather than
// a 404.
func toPage(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Location", "/ui")
	w.WriteHeader(http.StatusFound)
}

// securityHeaders keep the page to its own files: no inline script, no
// other origin, no framing.
func securityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
}

func (d *Dashboard) servePage(w http.ResponseWriter, r *http.Request) {
	d.serveFile(w, "index.html")
}

func (d *Dashboard) serveAsset(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("asset")
	if name == "index.html" || path.Base(name) != name {
		d.notFound(w, name)
		return
	}
	d.serveFile(w, name)
}

func (d *Dashboard) serveFile(w http.ResponseWriter, name string) {
	b, err := fs.ReadFile(assets, "assets/"+name)
	if err != nil {
		d.notFound(w, name)
		return
	}
	h := w.Header()
	securityHeaders(h)
	ct := mime.TypeByExtension(path.Ext(name))
	switch path.Ext(name) {
	case ".js":
		ct = "text/javascript; charset=utf-8"
	case ".html":
		ct = "text/html; charset=utf-8"
	case ".css":
		ct = "text/css; charset=utf-8"
	}
	h.Set("Content-Type", ct)
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.Write(b)
}

func (d *Dashboard) notFound(w http.ResponseWriter, name string) {
	httpapi.WriteProblem(w, http.StatusNotFound, "asset", fmt.Sprintf("the dashboard has no file %q", name))
}
