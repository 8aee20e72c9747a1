package server

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// logThrottle keeps repeated log lines from flooding the log: at most one
// line per key per interval, and the next line that goes out says how
// many were held back. A store outage fails every descriptor of every
// request; without it, that is one warning per descriptor (tens of
// thousands of lines a second). Keys are bounded: at most maxThrottleKeys,
// the rest share one.
type logThrottle struct {
	every time.Duration
	now   func() time.Time
	mu    sync.Mutex
	keys  map[string]*throttled
}

// throttled is one key's state: when its last line went out, and how many
// have been held back since.
type throttled struct {
	last time.Time
	held int
}

// maxThrottleKeys bounds the keys a logThrottle tracks.
const maxThrottleKeys = 1024

func newLogThrottle(every time.Duration) *logThrottle {
	return &logThrottle{every: every, now: time.Now, keys: make(map[string]*throttled)}
}

// log writes msg at level with args unless a line of key went out less
// than the interval ago; then it counts the line, and the next line of key
// that goes out carries "suppressed": the count.
func (lt *logThrottle) log(l *slog.Logger, level slog.Level, key, msg string, args ...any) {
	lt.mu.Lock()
	e := lt.keys[key]
	if e == nil {
		if len(lt.keys) >= maxThrottleKeys {
			key = "_other"
			e = lt.keys[key]
		}
		if e == nil {
			e = &throttled{}
			lt.keys[key] = e
		}
	}
	now := lt.now()
	if !e.last.IsZero() && now.Sub(e.last) < lt.every {
		e.held++
		lt.mu.Unlock()
		return
	}
	held := e.held
	e.last, e.held = now, 0
	lt.mu.Unlock()
	if held > 0 {
		args = append(args, "suppressed", held)
	}
	l.Log(context.Background(), level, msg, args...)
}

// LogThrottle keeps repeated log lines from flooding a log, as the
// server's own warnings are kept: at most one line per key per interval,
// and the next line of a key that goes out carries "suppressed", the
// count held back since. At most 1024 keys are tracked; the rest share
// one. It is safe for concurrent use.
type LogThrottle struct{ lt *logThrottle }

// NewLogThrottle returns a LogThrottle letting one line per key through
// every interval.
func NewLogThrottle(every time.Duration) *LogThrottle {
	return &LogThrottle{newLogThrottle(every)}
}

// Log writes msg at level to l, with args, unless a line of key went out
// less than the interval ago.
func (t *LogThrottle) Log(l *slog.Logger, level slog.Level, key, msg string, args ...any) {
	t.lt.log(l, level, key, msg, args...)
}
