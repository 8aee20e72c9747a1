package server

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

// TestLogThrottle: one line per key per interval; the next line that goes
// out says how many were held back; keys do not hold each other back.
func TestLogThrottle(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewTextHandler(&buf, nil))
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	lt := newLogThrottle(time.Second)
	lt.now = func() time.Time { return now }
	for range 100 {
		lt.log(l, slog.LevelWarn, "a", "store failed")
	}
	lt.log(l, slog.LevelWarn, "b", "other")
	now = now.Add(time.Second)
	lt.log(l, slog.LevelWarn, "a", "store failed")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[2], "suppressed=99") || strings.Contains(lines[0], "suppressed") {
		t.Errorf("lines:\n%s\nwant 3: a, b, and a again saying suppressed=99", buf.String())
	}
	for i := range 2 * maxThrottleKeys {
		lt.log(l, slog.LevelWarn, string(rune(i)), "x")
	}
	if len(lt.keys) > maxThrottleKeys+1 {
		t.Errorf("%d keys tracked, want at most %d", len(lt.keys), maxThrottleKeys+1)
	}
}

// TestUnknownDomainWarning: a request of a domain the config lacks is
// marked UnknownDomain and logged as a warning naming the domain; many
// such requests, of any domains, make one line a second, the next saying
// how many were held back; a known domain, with or without a matching
// rule, is neither marked nor logged.
func TestUnknownDomainWarning(t *testing.T) {
	d, err := config.Parse("edge.yaml", []byte("domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 5}\n"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.New(d)
	if err != nil {
		t.Fatal(err)
	}
	store := memstore.New(nil)
	t.Cleanup(func() { store.Close() })
	var buf bytes.Buffer
	s, err := New(Options{Store: store, Config: cfg, Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s.throttle.now = func() time.Time { return now }
	decide := func(domain, key string) Result {
		t.Helper()
		res, err := s.Decide(t.Context(), domain, []Descriptor{{Entries: []config.Entry{{Key: key, Value: "a"}}}}, 1)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	for _, tc := range []struct{ domain, key string }{{"edge", "user"}, {"edge", "no_such_key"}} {
		if res := decide(tc.domain, tc.key); res.UnknownDomain {
			t.Errorf("%s/%s: UnknownDomain set for a known domain", tc.domain, tc.key)
		}
	}
	if buf.Len() != 0 {
		t.Fatalf("known domain logged:\n%s", &buf)
	}
	for i := range 50 {
		res := decide(fmt.Sprintf("egde%d", i%3), "user")
		if !res.UnknownDomain || res.Code != OK || res.Statuses[0].Limited {
			t.Fatalf("unknown domain: %+v, want UnknownDomain, OK, not limited", res)
		}
	}
	now = now.Add(time.Second)
	decide("egde", "user")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "level=WARN") || !strings.Contains(lines[0], "domain=egde0") ||
		!strings.Contains(lines[1], "domain=egde") || !strings.Contains(lines[1], "suppressed=49") {
		t.Errorf("log:\n%s\nwant two warnings: domain=egde0, then domain=egde with suppressed=49", &buf)
	}
}
