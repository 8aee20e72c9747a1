//go:build unix

package ui

import (
	"errors"
	"io"
	"net"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/loop"
	"github.com/floodgate-rl/floodgate/internal/servertest"
)

// TestFeedWriteDeadline: a subscriber that never reads holds its stream
// only until a frame cannot be sent within WriteTimeout; then the stream
// ends and leaves the feed (it used to stay for as long as the client
// kept the connection).
func TestFeedWriteDeadline(t *testing.T) {
	srv := newServer(t)
	ticks := testTicker{make(chan time.Time)}
	d := New(srv, &Options{Interval: time.Hour, WriteTimeout: 100 * time.Millisecond, newTicker: func(time.Duration) loop.Ticker { return ticks }})
	t.Cleanup(d.Close)
	left := make(chan struct{})
	d.feed.onLeave = func() { close(left) }
	hs := httptest.NewUnstartedServer(servertest.Handler(t, srv, d.Handlers()))
	hs.Listener = smallBuffers{hs.Listener}
	hs.Start()
	t.Cleanup(hs.Close)

	c, err := (&net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}).Dial("tcp", hs.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /ui/events HTTP/1.1\r\nHost: x\r\n\r\n")
	for i := 0; ; i++ {
		select {
		case <-left:
			return
		case ticks.c <- time.Now():
		}
		if i > 100_000 {
			t.Fatal("a subscriber that reads nothing still held its stream after 100,000 frames")
		}
	}
}

// smallBuffers gives each accepted connection a small send buffer, so
// that a client that does not read blocks the server's writes soon.
type smallBuffers struct{ net.Listener }

func (l smallBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		err = errors.Join(err, tc.SetWriteBuffer(4096))
	}
	return c, err
}
