package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
)

// start runs the example on a free loopback port and returns its base URL.
// The server stops when the test ends.
func start(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, append([]string{"-addr", "127.0.0.1:0"}, args...), pw)
		pw.Close()
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the address: %v", err)
	}
	go io.Copy(io.Discard, pr)
	return strings.Fields(line)[2]
}

// open sends a request as user and returns the response once its headers
// have arrived, with the body still open.
func open(t *testing.T, ctx context.Context, url, user string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	if user != "" {
		req.Header.Set("X-User", user)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestConcurrency(t *testing.T) {
	base := start(t, "-max", "2", "-work", "1h")
	held, cancel := context.WithCancel(t.Context())
	defer cancel()

	// Two long exports for alice: both start, and hold their leases.
	for i := range 2 {
		resp := open(t, held, base+"/export", "alice")
		if resp.StatusCode != 200 {
			t.Fatalf("export %d: %d", i, resp.StatusCode)
		}
		if line, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil || line != "started\n" {
			t.Fatalf("export %d: %q %v", i, line, err)
		}
		defer resp.Body.Close()
		if got, want := resp.Header.Get("RateLimit"), []string{`"in-flight";r=1`, `"in-flight";r=0`}[i]; got != want {
			t.Errorf("export %d: RateLimit = %q, want %q", i, got, want)
		}
	}
	// A third is refused while they run.
	resp := open(t, t.Context(), base+"/export?work=0s", "alice")
	body := readAll(t, resp)
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(body, "quota-exceeded") {
		t.Fatalf("third export: %d %q, want 429", resp.StatusCode, body)
	}
	if got, want := resp.Header.Get("RateLimit-Policy"), `"in-flight";q=2;qu="concurrent-requests"`; got != want {
		t.Errorf("RateLimit-Policy = %q, want %q", got, want)
	}
	// The oldest lease expires in just under -lease-ttl, rounded up.
	if got := resp.Header.Get("Retry-After"); got != "60" {
		t.Errorf("Retry-After = %q, want 60", got)
	}

	// Bob has his own leases. Each export that finishes gives its lease
	// back before its response ends, so one after another never queue.
	for i := range 5 {
		resp := open(t, t.Context(), base+"/export?work=0s", "bob")
		if body := readAll(t, resp); resp.StatusCode != 200 || body != "started\ndone\n" {
			t.Fatalf("bob's export %d: %d %q", i, resp.StatusCode, body)
		}
	}

	// No user, no lease.
	resp = open(t, t.Context(), base+"/export", "")
	if body := readAll(t, resp); resp.StatusCode != 400 {
		t.Errorf("no user: %d %q, want 400", resp.StatusCode, body)
	}
	resp = open(t, t.Context(), base+"/export?work=soon", "carol")
	if body := readAll(t, resp); resp.StatusCode != 400 {
		t.Errorf("bad work: %d %q, want 400", resp.StatusCode, body)
	}
}
