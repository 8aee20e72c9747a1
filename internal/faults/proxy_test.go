package faults

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"
)

// echo serves one echo listener until the test ends.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

// TestProxy checks the proxy itself: bytes pass, latency delays them, and
// Reset breaks the connection.
func TestProxy(t *testing.T) {
	p, err := NewProxy(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	roundTrip := func() (time.Duration, error) {
		start := time.Now()
		if err := c.SetDeadline(start.Add(5 * time.Second)); err != nil {
			return 0, err
		}
		if _, err := c.Write([]byte("ping\n")); err != nil {
			return 0, err
		}
		line, err := r.ReadString('\n')
		if err == nil && line != "ping\n" {
			t.Errorf("echoed %q", line)
		}
		return time.Since(start), err
	}
	if _, err := roundTrip(); err != nil {
		t.Fatal(err)
	}
	const added = 50 * time.Millisecond
	p.SetLatency(added)
	if d, err := roundTrip(); err != nil || d < added {
		t.Errorf("with %v latency: round trip %v, %v", added, d, err)
	}
	p.SetLatency(0)
	if got := p.Reset(); len(got) != 1 || got[0] != c.LocalAddr().String() {
		t.Errorf("Reset closed %q, want the one connection from %s", got, c.LocalAddr())
	}
	if _, err := roundTrip(); err == nil {
		t.Error("the connection still works after Reset")
	}
}
