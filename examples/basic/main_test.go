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
	addr, ok := strings.CutPrefix(strings.Fields(line)[2], "http://")
	if !ok {
		t.Fatalf("first line %q", line)
	}
	return "http://" + addr
}

func get(t *testing.T, url string, header ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), "GET", url, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

func TestBasic(t *testing.T) {
	base := start(t, "-limit", "3", "-period", "1h")
	for i := range 3 {
		resp, body := get(t, base+"/hello")
		if resp.StatusCode != 200 || !strings.HasPrefix(body, "hello, ip:127.0.0.1:") {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
		}
	}
	resp, body := get(t, base+"/hello")
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("fourth request: %d %q, want 429", resp.StatusCode, body)
	}
	if got := resp.Header.Get("Retry-After"); got != "3600" {
		t.Errorf("Retry-After = %q, want 3600", got)
	}
	if got := resp.Header.Get("RateLimit-Policy"); got != `"per-client";q=3;w=3600` {
		t.Errorf("RateLimit-Policy = %q", got)
	}
	if !strings.Contains(body, "quota-exceeded") {
		t.Errorf("body %q", body)
	}
	// Health checks are never limited.
	if resp, _ := get(t, base+"/healthz"); resp.StatusCode != 200 {
		t.Errorf("/healthz: %d", resp.StatusCode)
	}
	// A spoofed X-Forwarded-For changes nothing without -trust.
	if resp, _ := get(t, base+"/hello", "X-Forwarded-For", "203.0.113.9"); resp.StatusCode != 429 {
		t.Errorf("spoofed X-Forwarded-For: %d, want 429", resp.StatusCode)
	}
}

func TestBasicBehindProxy(t *testing.T) {
	base := start(t, "-limit", "1", "-period", "1h", "-trust", "127.0.0.0/8")
	if resp, body := get(t, base+"/hello", "X-Forwarded-For", "203.0.113.9"); resp.StatusCode != 200 || !strings.Contains(body, "ip:203.0.113.9") {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	if resp, _ := get(t, base+"/hello", "X-Forwarded-For", "203.0.113.9"); resp.StatusCode != 429 {
		t.Errorf("same client again: %d, want 429", resp.StatusCode)
	}
	if resp, _ := get(t, base+"/hello", "X-Forwarded-For", "203.0.113.10"); resp.StatusCode != 200 {
		t.Errorf("another client: %d, want 200", resp.StatusCode)
	}
}

func TestBadFlag(t *testing.T) {
	if err := run(t.Context(), []string{"-trust", "not-a-cidr"}, io.Discard); err == nil || !strings.Contains(err.Error(), "-trust") {
		t.Errorf("run: %v", err)
	}
}
