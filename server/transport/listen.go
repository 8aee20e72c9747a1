package transport

import (
	"crypto/tls"
	"log"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
)

// ListenOptions bound a listener of Listen. The zero value of a field is
// its default; a nil *ListenOptions means every default.
type ListenOptions struct {
	// MaxConns is the most connections the listener holds open at once:
	// more wait in the kernel's accept queue until one closes, so that
	// clients opening thousands cannot take every file descriptor.
	// Default DefaultMaxConns.
	MaxConns int
	// MaxConnsPerPeer is the most connections one peer holds open at
	// once: a peer is a remote IPv4 address, or an IPv6 /64 (what one
	// host is usually given). A connection beyond it is closed as soon as
	// it is accepted, before any TLS handshake, so that one peer cannot
	// take MaxConns and starve the others (health checks included).
	// Default DefaultMaxConnsPerPeer or half of MaxConns, whichever is
	// less (at least 1), so that another peer always has room; never
	// above MaxConns.
	MaxConnsPerPeer int
	// TLS, if set, makes the listener speak TLS, negotiating Protos by
	// ALPN ("h2" and "http/1.1" for HTTP). A gRPC listener takes its TLS
	// from GRPCServerOptions instead, so give it nil.
	TLS    *TLSFiles
	Protos []string
	// OnRefused, if set, hears of each connection closed because its
	// peer held MaxConnsPerPeer already (peer as Peer names it). It must
	// not block: it runs in the accepting goroutine.
	OnRefused func(peer string)
}

// Defaults of ListenOptions.
const (
	DefaultMaxConns        = 10_000
	DefaultMaxConnsPerPeer = 1_000
)

func (o *ListenOptions) withDefaults() ListenOptions {
	var c ListenOptions
	if o != nil {
		c = *o
	}
	if c.MaxConns <= 0 {
		c.MaxConns = DefaultMaxConns
	}
	if c.MaxConnsPerPeer <= 0 {
		c.MaxConnsPerPeer = min(DefaultMaxConnsPerPeer, max(1, c.MaxConns/2))
	}
	c.MaxConnsPerPeer = min(c.MaxConnsPerPeer, c.MaxConns)
	return c
}

// Listen listens on the TCP address addr within the bounds of opts (nil:
// the defaults): at most MaxConns connections at once, at most
// MaxConnsPerPeer of them from one peer.
func Listen(addr string, opts *ListenOptions) (net.Listener, error) {
	o := opts.withDefaults()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	ln = newLimitListener(ln, o.MaxConns, o.MaxConnsPerPeer, o.OnRefused)
	if o.TLS != nil {
		ln = tls.NewListener(ln, o.TLS.Config(o.Protos...))
	}
	return ln, nil
}

// Peer is the peer of a remote address for the per-peer bounds of
// floodgate serve (connections, the dashboard's subscribers): its IPv4
// address, or the /64 of its IPv6 address, as text; the address itself
// when it is not an IP address and port.
func Peer(remote string) string {
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		return remote
	}
	return peerOf(ap.Addr())
}

func peerOf(a netip.Addr) string {
	a = a.Unmap()
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.String()
	}
	return a.String()
}

// limitListener is netutil.LimitListener with a bound per peer as well:
// a semaphore of max slots, taken before Accept (so that connections
// beyond it wait in the kernel's queue) and given back when the
// connection closes; and a count per peer, checked once accepted.
type limitListener struct {
	net.Listener
	sem       chan struct{}
	perPeer   int
	onRefused func(string)

	mu    sync.Mutex
	peers map[string]int

	closeOnce sync.Once
	done      chan struct{}
}

func newLimitListener(ln net.Listener, max, perPeer int, onRefused func(string)) *limitListener {
	return &limitListener{Listener: ln, sem: make(chan struct{}, max), perPeer: perPeer, onRefused: onRefused,
		peers: make(map[string]int), done: make(chan struct{})}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		select {
		case l.sem <- struct{}{}:
		case <-l.done:
			return nil, net.ErrClosed
		}
		c, err := l.Listener.Accept()
		if err != nil {
			<-l.sem
			return nil, err
		}
		peer := "?"
		if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
			peer = peerOf(ta.AddrPort().Addr())
		}
		l.mu.Lock()
		if l.peers[peer] >= l.perPeer {
			l.mu.Unlock()
			c.Close()
			<-l.sem
			if l.onRefused != nil {
				l.onRefused(peer)
			}
			continue
		}
		l.peers[peer]++
		l.mu.Unlock()
		return &limitConn{Conn: c, l: l, peer: peer}, nil
	}
}

func (l *limitListener) release(peer string) {
	l.mu.Lock()
	if l.peers[peer]--; l.peers[peer] <= 0 {
		delete(l.peers, peer)
	}
	l.mu.Unlock()
	<-l.sem
}

func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.done) })
	return err
}

// limitConn gives its slots back once, at its first Close.
type limitConn struct {
	net.Conn
	l    *limitListener
	peer string
	once sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.peer) })
	return err
}

// HTTPOptions bound the requests and responses of NewHTTPServer. The zero
// value of a field is its default; a nil *HTTPOptions means every
// default.
type HTTPOptions struct {
	// ReadTimeout is the longest a request, its body included, may take
	// to arrive; its header must arrive within 5 s. Default 30 s.
	ReadTimeout time.Duration
	// WriteTimeout is the longest from the end of a request's header to
	// the end of its response: a client that does not read its answer
	// loses the connection then, rather than holding it for ever.
	// Streams that outlive it (the dashboard's feed) set a deadline per
	// write with http.ResponseController. Default DefaultWriteTimeout.
	WriteTimeout time.Duration
	// ErrorLog receives the server's own errors (a TLS handshake that
	// failed, say); nil: the log package's standard logger.
	ErrorLog *log.Logger
}

// DefaultWriteTimeout is HTTPOptions.WriteTimeout's default.
const DefaultWriteTimeout = 30 * time.Second

// NewHTTPServer is an http.Server of h whose requests must arrive in time
// and whose responses must leave in time (opts: nil for the defaults); a
// connection idle for 2 minutes is closed.
func NewHTTPServer(h http.Handler, opts *HTTPOptions) *http.Server {
	var o HTTPOptions
	if opts != nil {
		o = *opts
	}
	if o.ReadTimeout <= 0 {
		o.ReadTimeout = 30 * time.Second
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: min(5*time.Second, o.ReadTimeout),
		ReadTimeout:       o.ReadTimeout,
		WriteTimeout:      o.WriteTimeout,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          o.ErrorLog,
	}
}

// DefaultStreamWorkers is GRPCOptions.StreamWorkers' default.
const DefaultStreamWorkers = 128

// DefaultMaxStreams is GRPCOptions.MaxStreams' default.
const DefaultMaxStreams = 100

// GRPCOptions bound what one client can hold on a gRPC listener. The
// zero value of a field is its default; a nil *GRPCOptions means every
// default.
type GRPCOptions struct {
	// MaxIdle: a connection without a call for this long is closed
	// (GOAWAY). Default 5 minutes.
	MaxIdle time.Duration
	// StreamWorkers is the number of goroutines kept to serve calls
	// (grpc.NumStreamWorkers); default DefaultStreamWorkers. A worker
	// serves each call on a goroutine whose stack has already grown,
	// where a goroutine per call (gRPC's default) grows and copies a new
	// stack for every call; calls beyond the workers still get a
	// goroutine of their own, so the number bounds nothing. The workers
	// take calls in turn, first idle first, and every garbage collection
	// halves the stack of each idle one, which its next call grows
	// again: more workers than calls in flight cost a stack copy per
	// worker per collection, fewer a new goroutine's growth per call
	// beyond them.
	StreamWorkers int
	// MaxStreams is the most calls in flight on one connection (HTTP/2's
	// SETTINGS_MAX_CONCURRENT_STREAMS): a client that opens more has them
	// refused (REFUSED_STREAM), never queued. Default DefaultMaxStreams.
	MaxStreams uint32
	// TLS, if set, makes the listener speak TLS ("h2").
	TLS *TLSFiles
	// Auth, if set, holds every call but health checks to client tokens
	// (see Auth.GRPCOptions).
	Auth *Auth
}

// GRPCServerOptions are the options of a gRPC server within the bounds
// of opts (nil: the defaults): at most MaxStreams calls in flight per
// connection; a connection idle for MaxIdle is closed, every connection
// is recycled after a day so that none lives for ever, and a client that
// pings more often than every 10 s is disconnected, as gRPC's keepalive
// enforcement does, rather than holding the connection open with pings
// alone. With Auth, a call without a valid token is refused before it
// has a goroutine (Auth.GRPCOptions).
func GRPCServerOptions(opts *GRPCOptions) []grpc.ServerOption {
	var o GRPCOptions
	if opts != nil {
		o = *opts
	}
	if o.MaxIdle <= 0 {
		o.MaxIdle = 5 * time.Minute
	}
	if o.MaxStreams == 0 {
		o.MaxStreams = DefaultMaxStreams
	}
	if o.StreamWorkers <= 0 {
		o.StreamWorkers = DefaultStreamWorkers
	}
	gopts := []grpc.ServerOption{
		grpc.NumStreamWorkers(uint32(o.StreamWorkers)),
		grpc.MaxConcurrentStreams(o.MaxStreams),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle:     o.MaxIdle,
			MaxConnectionAge:      24 * time.Hour,
			MaxConnectionAgeGrace: 10 * time.Second,
			Time:                  2 * time.Minute,
			Timeout:               20 * time.Second,
		}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	}
	if o.TLS != nil {
		gopts = append(gopts, grpc.Creds(credentials.NewTLS(o.TLS.Config("h2"))))
	}
	return append(gopts, o.Auth.GRPCOptions()...)
}

// DebugHandler serves Go's profiler at /debug/pprof/. Serve it on a
// listener of its own, on loopback (`floodgate serve -debug-addr`), never
// on the API's: /debug/pprof/cmdline reveals the command line, secrets in
// flags included, and a profile costs the process CPU.
func DebugHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}
