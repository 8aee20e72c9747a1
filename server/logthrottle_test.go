package server

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
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
