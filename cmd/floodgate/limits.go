package main

import (
	"log"
	"log/slog"
	"strings"

	"github.com/floodgate-rl/floodgate/server"
	"github.com/floodgate-rl/floodgate/server/transport"
)

// maxReserved is the most file descriptors maxConnsFor keeps out of the
// listeners' reach: for the store's and the ledger's connections, the
// config and token files and their watches, the debug listener, the
// standard streams.
const maxReserved = 1024

// reservedFiles is what maxConnsFor keeps for the rest of the process
// under a file limit of nofile: maxReserved, or half the limit when that
// is less.
func reservedFiles(nofile uint64) uint64 { return min(maxReserved, nofile/2) }

// maxConnsFor is -max-connections' default for n listeners under a file
// limit of nofile (RLIMIT_NOFILE, which Go raises to the hard limit at
// start; 0 if unknown):
//
//	min(transport.DefaultMaxConns, (nofile - min(1024, nofile/2)) / n)
//
// so that the listeners' connections together, at their caps, leave the
// reserved descriptors free: 10,000 per listener from a limit of 21,024
// up; 9,488 each for two listeners under 20,000; 256 each under 1,024.
func maxConnsFor(nofile uint64, n int) int {
	if nofile == 0 || n < 1 {
		return transport.DefaultMaxConns
	}
	per := (nofile - reservedFiles(nofile)) / uint64(n)
	return int(max(1, min(per, transport.DefaultMaxConns)))
}

// throttledErrorLog is the ErrorLog of serve's HTTP server: each of its
// lines (a TLS handshake that failed, an accept error) goes to log as a
// warning, at most one a second of each kind, the next one out counting
// those held back, so that a client failing thousands of handshakes
// cannot flood the log.
func throttledErrorLog(l *slog.Logger, t *server.LogThrottle) *log.Logger {
	return log.New(errorLogWriter{l, t}, "", 0)
}

type errorLogWriter struct {
	log      *slog.Logger
	throttle *server.LogThrottle
}

func (w errorLogWriter) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	w.throttle.Log(w.log, slog.LevelWarn, "http_error:"+errorKind(msg), "HTTP server error", "error", msg)
	return len(p), nil
}

// errorKind is the kind of a line of net/http's error log, without what
// varies from one line of the kind to the next (the peer's address, the
// cause): "http: TLS handshake error" of "http: TLS handshake error from
// 127.0.0.1:5000: EOF".
func errorKind(msg string) string {
	rest := strings.TrimPrefix(msg, "http: ")
	if i := strings.Index(rest, " from "); i >= 0 {
		rest = rest[:i]
	}
	if i := strings.Index(rest, ":"); i >= 0 {
		rest = rest[:i]
	}
	return rest[:min(len(rest), 64)]
}
