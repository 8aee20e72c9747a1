package faults

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy forwards TCP connections from its own loopback address to a
// target, adding a configurable delay to everything the client sends (so
// each request/reply round trip takes that much longer) and resetting
// every open connection on demand. The zero value is not a proxy; use
// NewProxy. Its methods are safe for concurrent use.
type Proxy struct {
	ln      net.Listener
	target  string
	latency atomic.Int64 // nanoseconds added to client-to-target bytes

	mu     sync.Mutex
	links  map[*link]struct{}
	closed bool
	wg     sync.WaitGroup
}

// link is one proxied connection: the client's and the target's side.
type link struct {
	client, server net.Conn
	once           sync.Once
	done           chan struct{}
}

// close ends both sides; with reset, as a TCP RST (SO_LINGER 0) instead of
// an orderly FIN, as a crashed middlebox or a dropped NAT entry would.
func (l *link) close(reset bool) {
	l.once.Do(func() {
		if reset {
			for _, c := range []net.Conn{l.client, l.server} {
				if tc, ok := c.(*net.TCPConn); ok {
					_ = tc.SetLinger(0)
				}
			}
		}
		l.client.Close()
		l.server.Close()
		close(l.done)
	})
}

// NewProxy listens on a free port of 127.0.0.1 and forwards every
// connection to target ("host:port"). Close stops it.
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faults: proxy listen: %w", err)
	}
	p := &Proxy{ln: ln, target: target, links: make(map[*link]struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's address, "127.0.0.1:<port>": point the client here.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetLatency delays every chunk the client sends by d from now on (0
// forwards at once). Chunks already queued keep their delay; order is
// kept.
func (p *Proxy) SetLatency(d time.Duration) { p.latency.Store(int64(max(d, 0))) }

// Reset closes every open connection with a TCP RST and returns the
// clients' addresses of the connections it closed (each "127.0.0.1:port",
// the client's local address), so a test can tell a late failure on a
// connection it reset from a failure on a new one. New connections are
// accepted as before.
func (p *Proxy) Reset() []string {
	p.mu.Lock()
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	addrs := make([]string, 0, len(links))
	for _, l := range links {
		addrs = append(addrs, l.client.RemoteAddr().String())
		l.close(true)
	}
	return addrs
}

// Close stops accepting, closes every connection, and waits for the
// proxy's goroutines to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.Reset()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// serve proxies one client connection until either side closes it.
func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		client.Close()
		return
	}
	l := &link{client: client, server: server, done: make(chan struct{})}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		l.close(false)
		return
	}
	p.links[l] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.links, l)
		p.mu.Unlock()
	}()

	var pumps sync.WaitGroup
	pumps.Go(func() {
		// Target to client: as it comes.
		_, _ = io.Copy(client, server)
		l.close(false)
	})
	pumps.Go(func() {
		p.delayed(l)
		l.close(false)
	})
	pumps.Wait()
}

// chunk is a piece of the client's stream and when it may be sent on.
type chunk struct {
	b   []byte
	due time.Time
}

// delayed forwards the client's bytes to the target, each chunk held until
// the latency in force when it was read has passed.
func (p *Proxy) delayed(l *link) {
	queue := make(chan chunk, 1024)
	go func() {
		defer close(queue)
		for {
			b := make([]byte, 32<<10)
			n, err := l.client.Read(b)
			if n > 0 {
				c := chunk{b: b[:n], due: time.Now().Add(time.Duration(p.latency.Load()))}
				select {
				case queue <- c:
				case <-l.done:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for c := range queue {
		if wait := time.Until(c.due); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-l.done:
				continue // drain until the reader sees the closed conn
			}
		}
		if _, err := l.server.Write(c.b); err != nil {
			if !errors.Is(err, net.ErrClosed) {
				l.close(false)
			}
			continue
		}
	}
}
