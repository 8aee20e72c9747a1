package transport_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/server/transport"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

// dialFrom dials addr from the loopback address local (127.0.0.2 is
// another peer than 127.0.0.1; Linux routes all of 127/8 to loopback),
// with a receive buffer of rcvbuf bytes if above 0; it skips the test
// where the address cannot be bound.
func dialFrom(t testing.TB, local, addr string, rcvbuf int) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	if rcvbuf > 0 {
		d.Control = func(_, _ string, c syscall.RawConn) error {
			var serr error
			err := c.Control(func(fd uintptr) { serr = setRcvbuf(fd, rcvbuf) })
			return errors.Join(err, serr)
		}
	}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		if local != "127.0.0.1" {
			t.Skipf("cannot dial from %s: %v", local, err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestListenPerPeer: a peer holding MaxConnsPerPeer connections (by
// default half of MaxConns) has its next one closed at once, and
// counted, while another peer is still served; once one of its
// connections closes, the peer is served again.
func TestListenPerPeer(t *testing.T) {
	refused := make(chan string, 10)
	ln, err := transport.Listen("127.0.0.1:0", &transport.ListenOptions{MaxConns: 4,
		OnRefused: func(peer string) { refused <- peer }})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 10)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	addr := ln.Addr().String()
	a1, a2 := dialFrom(t, "127.0.0.2", addr, 0), dialFrom(t, "127.0.0.2", addr, 0)
	s1, s2 := <-accepted, <-accepted
	defer s2.Close()
	third := dialFrom(t, "127.0.0.2", addr, 0)
	if peer := <-refused; peer != "127.0.0.2" {
		t.Errorf("refused peer %q, want 127.0.0.2", peer)
	}
	third.SetReadDeadline(time.Now().Add(30 * time.Second))
	if n, err := third.Read(make([]byte, 1)); err == nil || errors.Is(err, context.DeadlineExceeded) || n > 0 {
		t.Errorf("the third connection of a peer: read %d, %v; want it closed", n, err)
	}
	other := dialFrom(t, "127.0.0.1", addr, 0)
	s3 := <-accepted
	defer s3.Close()
	if got := s3.RemoteAddr().(*net.TCPAddr).IP.String(); got != "127.0.0.1" {
		t.Errorf("accepted %s, want the other peer", got)
	}
	s1.Close()
	a1.Close()
	dialFrom(t, "127.0.0.2", addr, 0)
	s4 := <-accepted
	defer s4.Close()
	_, _ = a2, other
	select {
	case peer := <-refused:
		t.Errorf("refused %s once a slot was free", peer)
	default:
	}
}

// TestPeer: a peer is an IPv4 address or an IPv6 /64.
func TestPeer(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:80":             "127.0.0.1",
		"[::ffff:10.0.0.1]:80":     "10.0.0.1",
		"[2001:db8:1:2:3:4:5:6]:1": "2001:db8:1:2::/64",
		"[2001:db8:1:2:ff::1]:1":   "2001:db8:1:2::/64",
		"pipe":                     "pipe",
	} {
		if got := transport.Peer(in); got != want {
			t.Errorf("Peer(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestWriteTimeoutEndsSlowReader: a client that asks for a large answer
// and never reads it holds its connection only until WriteTimeout: the
// handler's write then fails and the connection closes. (Without a write
// deadline the write blocks for as long as the client stays.)
func TestWriteTimeoutEndsSlowReader(t *testing.T) {
	wrote := make(chan error, 1)
	big := bytes.Repeat([]byte("x"), 64<<20)
	srv := transport.NewHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := w.Write(big)
		wrote <- err
	}), &transport.HTTPOptions{WriteTimeout: 200 * time.Millisecond})
	ln, err := transport.Listen("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Close()
	c := dialFrom(t, "127.0.0.1", ln.Addr().String(), 4096)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	select {
	case err := <-wrote:
		if err == nil {
			t.Error("64 MiB written to a client that reads nothing")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a write to a client that never reads still blocked after 30 s; want it ended by the write timeout")
	}
}

// rawH2 is a client of a gRPC server that speaks HTTP/2 frames itself,
// so that it can do what grpc-go's client never does: open streams
// beyond the server's SETTINGS_MAX_CONCURRENT_STREAMS, and leave them
// half-open (headers, no message).
type rawH2 struct {
	conn net.Conn
	fr   *http2.Framer
	hbuf bytes.Buffer
	enc  *hpack.Encoder
	next uint32
}

func dialH2(t testing.TB, addr string) *rawH2 {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	h := &rawH2{conn: c, fr: http2.NewFramer(c, c), next: 1}
	h.enc = hpack.NewEncoder(&h.hbuf)
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := h.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return h
}

// open opens a stream calling method, its headers with token (unless
// empty), and sends no message.
func (h *rawH2) open(method, token string) error {
	h.hbuf.Reset()
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", method}, {":authority", "x"},
		{"content-type", "application/grpc"}, {"te", "trailers"}} {
		h.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if token != "" {
		h.enc.WriteField(hpack.HeaderField{Name: "authorization", Value: "Bearer " + token})
	}
	id := h.next
	h.next += 2
	return h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h.hbuf.Bytes(), EndHeaders: true})
}

// tally reads frames until the server has answered want streams (a
// RST_STREAM, or HEADERS ending the stream: a refusal as a status), or
// the connection fails; it returns the settings the server sent, the
// streams reset as REFUSED_STREAM and the streams answered with a status.
func (h *rawH2) tally(want int) (maxStreams uint32, refused, answered int, err error) {
	maxStreams = 1<<32 - 1
	h.conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	for refused+answered < want {
		f, err := h.fr.ReadFrame()
		if err != nil {
			return maxStreams, refused, answered, err
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if v, ok := f.Value(http2.SettingMaxConcurrentStreams); ok {
				maxStreams = v
			}
			if !f.IsAck() {
				h.fr.WriteSettingsAck()
			}
		case *http2.RSTStreamFrame:
			if f.ErrCode == http2.ErrCodeRefusedStream {
				refused++
			}
		case *http2.HeadersFrame:
			if f.StreamEnded() {
				answered++
			}
		}
	}
	return maxStreams, refused, answered, nil
}

// block is a gRPC service whose one unary method waits for ctx: what a
// half-open call costs is the goroutine that waits for its message.
func serveGRPC(t testing.TB, opts *transport.GRPCOptions) string {
	t.Helper()
	g := grpc.NewServer(transport.GRPCServerOptions(opts)...)
	g.RegisterService(&grpc.ServiceDesc{ServiceName: "test.Block", HandlerType: (*any)(nil), Methods: []grpc.MethodDesc{{
		MethodName: "Wait",
		Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		},
	}}}, struct{}{})
	ln, err := transport.Listen("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	return ln.Addr().String()
}

// TestGRPCMaxStreams: the server says how many streams a connection may
// have in flight, and refuses those beyond (REFUSED_STREAM) rather than
// giving each a goroutine.
func TestGRPCMaxStreams(t *testing.T) {
	addr := serveGRPC(t, &transport.GRPCOptions{MaxStreams: 5})
	h := dialH2(t, addr)
	before := runtime.NumGoroutine()
	for range 50 {
		if err := h.open("/test.Block/Wait", ""); err != nil {
			t.Fatal(err)
		}
	}
	maxStreams, refused, _, err := h.tally(45)
	if err != nil {
		t.Fatalf("refused %d of the 45 streams beyond the bound: %v", refused, err)
	}
	if maxStreams != 5 || refused != 45 {
		t.Errorf("SETTINGS_MAX_CONCURRENT_STREAMS %d, refused %d of 50; want 5 and 45", maxStreams, refused)
	}
	if grown := runtime.NumGoroutine() - before; grown > 5+10 {
		t.Errorf("%d goroutines more for 5 streams in flight", grown)
	}
}

// TestGRPCUnauthenticatedRefusedAtOnce: with token files, a call without
// a valid token is answered Unauthenticated as its headers arrive, before
// its message (gRPC's tap handle), so a client without a token cannot
// hold calls open; a health check needs none, and a token's scheme is
// case-insensitive.
func TestGRPCUnauthenticatedRefusedAtOnce(t *testing.T) {
	auth, err := transport.LoadAuth(tokenFile(t, "client-0123456789abcdef\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	addr := serveGRPC(t, &transport.GRPCOptions{MaxStreams: 1000, Auth: auth})
	h := dialH2(t, addr)
	for range 100 {
		if err := h.open("/test.Block/Wait", ""); err != nil {
			t.Fatal(err)
		}
	}
	if _, refused, answered, err := h.tally(100); err != nil || answered != 100 {
		t.Fatalf("of 100 half-open calls without a token, %d answered and %d refused before their message: %v", answered, refused, err)
	}

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	err = conn.Invoke(ctx, "/test.Block/Wait", &emptypb.Empty{}, &emptypb.Empty{})
	if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "bearer token is required") {
		t.Errorf("a call without a token: %v, want Unauthenticated", err)
	}
}
