package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/redistest"
	"google.golang.org/grpc"
)

// dialPeer dials addr from the loopback address local (127.0.0.2 is
// another peer than 127.0.0.1: Linux routes all of 127/8 to loopback),
// with a receive buffer of rcvbuf bytes if above 0 (a client that
// reads nothing then blocks the server's writes soon); it skips the
// test where local cannot be bound.
func dialPeer(t *testing.T, local, addr string, rcvbuf int) (net.Conn, error) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}, Control: rcvbufControl(rcvbuf)}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { c.Close() })
	return c, nil
}

// TestServeHealthzUnderSlowReaders: a peer that opens 30 connections,
// each asking for 200 copies of the OpenAPI document (15 MB) and reading
// none, holds only its 5 (-max-connections-per-peer) of the 20 the
// listener serves, the other 25 closed at once; /healthz from another
// peer still answers. (Without the per-peer cap, the 20 connections were
// all the slow reader's, each blocked in a write for ever, and /healthz
// waited behind them.)
func TestServeHealthzUnderSlowReaders(t *testing.T) {
	in := startServe(t, "-max-connections", "20", "-max-connections-per-peer", "5", "-write-timeout", "10m")
	addr := strings.TrimPrefix(in.httpURL, "http://")
	requests := strings.Repeat("GET /openapi.yaml HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 200)
	for i := range 30 {
		c, err := dialPeer(t, "127.0.0.2", addr, 4096)
		if err != nil {
			if i == 0 {
				t.Skipf("cannot dial from 127.0.0.2: %v", err)
			}
			t.Fatal(err)
		}
		c.SetWriteDeadline(time.Now().Add(time.Second))
		io.WriteString(c, requests) // a refused connection fails here: no matter
	}
	waitUntil(t, 30*time.Second, func() bool {
		return in.metric(t, `floodgate_connections_refused_total{listener="http"}`) == 25
	})
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get(in.httpURL + "/healthz")
	if err != nil {
		t.Fatalf("/healthz while a peer holds its connections with answers it does not read: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz: %d", resp.StatusCode)
	}
}

// TestServeBrowserGuard: without token files, a cross-site text/plain
// POST (a form, or fetch without a preflight) is refused and resets
// nothing, and a Host that is not this server's (DNS rebinding) cannot
// read the config; -allowed-hosts adds a name.
func TestServeBrowserGuard(t *testing.T) {
	in := startServe(t, "-allowed-hosts", "rl.internal, other.example")
	allow := `{"key": "k", "limit": {"limit": 1, "period": "1h"}}`
	if code, body := in.allow(t, allow); code != http.StatusOK {
		t.Fatalf("allow: %d %s", code, body)
	}
	resp, err := http.Post(in.httpURL+"/v1/reset", "text/plain", strings.NewReader(allow))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Errorf("a text/plain POST /v1/reset: %d, want 415", resp.StatusCode)
	}
	if _, body := in.allow(t, allow); !strings.Contains(body, `"allowed":false`) {
		t.Errorf("the key was reset by a text/plain POST: %s", body)
	}
	for host, want := range map[string]int{"evil.example:80": http.StatusMisdirectedRequest, "rl.internal": http.StatusOK,
		"other.example:8080": http.StatusOK, "localhost:1": http.StatusOK} {
		req, _ := http.NewRequest("GET", in.httpURL+"/v1/config", nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET /v1/config with Host %s: %d, want %d", host, resp.StatusCode, want)
		}
	}
}

// TestServeAllowedHostsFlag: -allowed-hosts takes names, not URLs.
func TestServeAllowedHostsFlag(t *testing.T) {
	var stderr bytes.Buffer
	if code := run(t.Context(), []string{"serve", "-allowed-hosts", "http://rl.internal:8080"}, io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), "-allowed-hosts") {
		t.Errorf("exit %d, %s; want 2 naming -allowed-hosts", code, stderr.String())
	}
}

// TestServeTLSHandshakeLogThrottled: 200 failed TLS handshakes log at
// most one line a second (they logged 200).
func TestServeTLSHandshakeLogThrottled(t *testing.T) {
	certs := redistest.NewCerts(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	copyFile(t, certs.ServerCertFile, certFile)
	copyFile(t, certs.ServerKeyFile, keyFile)
	in := startServe(t, "-tls-cert", certFile, "-tls-key", keyFile)
	addr := strings.TrimPrefix(in.httpURL, "http://")
	began := time.Now()
	for range 200 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, "not a TLS handshake\r\n\r\n")
		// The server logs the failure, then closes: read until it has.
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		if _, err := io.Copy(io.Discard, c); errors.Is(err, context.DeadlineExceeded) {
			t.Fatal("the server kept a failed handshake's connection open for 30 s")
		}
		c.Close()
	}
	elapsed := time.Since(began)
	lines := strings.Count(in.stderr.String(), "TLS handshake error")
	if lines < 1 || float64(lines) > elapsed.Seconds()+2 {
		t.Errorf("200 failed handshakes in %v logged %d lines, want 1 to %.0f (one a second):\n%s", elapsed, lines, elapsed.Seconds()+2, in.stderr)
	}
}

// TestShutdownLogsOnlyWhatWasCut: a shutdown whose timeout cuts off an
// HTTP request, while the gRPC server had nothing left to finish, logs
// the HTTP side only (the gRPC warning came with it at random, when the
// last select saw both the timeout and gRPC's end).
func TestShutdownLogsOnlyWhatWasCut(t *testing.T) {
	for i := range 20 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		inHandler, release := make(chan struct{}), make(chan struct{})
		l := &listeners{httpLn: ln, http: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			close(inHandler)
			<-release
		})}, grpc: grpc.NewServer()}
		errc := l.http.Serve
		go errc(ln)
		got := make(chan error, 1)
		go func() {
			resp, err := http.Get("http://" + ln.Addr().String() + "/")
			if err == nil {
				resp.Body.Close()
			}
			got <- err
		}()
		<-inHandler
		var logs bytes.Buffer
		if l.shutdown(100*time.Millisecond, slog.New(slog.NewTextHandler(&logs, nil))) {
			t.Error("shutdown complete with a request in its handler")
		}
		close(release)
		<-got
		if s := logs.String(); !strings.Contains(s, "HTTP shutdown incomplete") || strings.Contains(s, "gRPC") {
			t.Fatalf("shutdown %d: logged\n%s\nwant the HTTP warning only", i, s)
		}
	}
}

// TestMaxConnsFor: the default connection caps of the listeners and the
// descriptors kept for the rest never add up to more than the file
// limit, and are the documented ones.
func TestMaxConnsFor(t *testing.T) {
	for _, tc := range []struct {
		nofile uint64
		n      int
		want   int
	}{
		{0, 2, 10_000},
		{1_048_576, 2, 10_000},
		{21_024, 2, 10_000},
		{20_000, 2, 9_488},
		{20_000, 1, 10_000},
		{1_024, 2, 256},
		{64, 2, 16},
		{1, 2, 1},
	} {
		if got := maxConnsFor(tc.nofile, tc.n); got != tc.want {
			t.Errorf("maxConnsFor(%d, %d) = %d, want %d", tc.nofile, tc.n, got, tc.want)
		}
	}
	for nofile := uint64(3); nofile < 100_000; nofile = nofile*3/2 + 1 {
		for n := 1; n <= 2; n++ {
			if sum := uint64(n*maxConnsFor(nofile, n)) + reservedFiles(nofile); sum > nofile {
				t.Errorf("file limit %d, %d listeners: %d connections and %d reserved", nofile, n, n*maxConnsFor(nofile, n), reservedFiles(nofile))
			}
		}
	}
}

// TestErrorKind: the kinds of net/http's error lines leave out what
// varies.
func TestErrorKind(t *testing.T) {
	for in, want := range map[string]string{
		"http: TLS handshake error from 127.0.0.1:5000: EOF":                                       "TLS handshake error",
		"http: TLS handshake error from [::1]:5000: tls: first record does not look like a TLS...": "TLS handshake error",
		"http: Accept error: accept tcp: too many open files; retrying in 5ms":                     "Accept error",
		"http: panic serving 1.2.3.4:5: boom":                                                      "panic serving 1.2.3.4",
		"http2: server: error reading preface from client 1.2.3.4:5: EOF":                          "http2",
	} {
		if got := errorKind(in); got != want {
			t.Errorf("errorKind(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestServeStreamWorkersFlag: -grpc-stream-workers is from 1 to 65536; a
// value outside is a usage error naming the flag, not a server started
// with gRPC's default of a goroutine per call.
func TestServeStreamWorkersFlag(t *testing.T) {
	for _, v := range []string{"0", "-1", "65537"} {
		var stderr bytes.Buffer
		if code := run(t.Context(), []string{"serve", "-grpc-stream-workers", v}, io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), "-grpc-stream-workers") {
			t.Errorf("-grpc-stream-workers %s: exit %d, %s; want 2 naming the flag", v, code, stderr.String())
		}
	}
}
