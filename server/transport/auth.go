// Package transport is what `floodgate serve` puts between a network and
// its services: bearer tokens and their scopes (Auth), for the HTTP API
// and the gRPC services alike; the TLS files of both listeners
// (TLSFiles), read again when they change; and the bounds of a listener
// (Listen, GRPCServerOptions, NewHTTPServer): how many connections it
// holds, how long one may idle, how long a request may take to arrive.
// It knows no route and no protocol of Floodgate's own.
package transport

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/floodgate-rl/floodgate/internal/loop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// Scope is what a route needs of its caller's bearer token.
type Scope int

const (
	// ScopeOpen needs no token: health checks, /metrics, the OpenAPI
	// document.
	ScopeOpen Scope = iota
	// ScopeClient needs a client token or an admin token: decisions,
	// reservations, leases, Envoy's gRPC service and POST /json.
	ScopeClient
	// ScopeAdmin needs an admin token: what changes or reveals the state of
	// others (POST /v1/reset, GET /v1/config, the detail of /readyz).
	ScopeAdmin
)

// MinTokenLen is the shortest bearer token a token file may hold: 16
// bytes, 128 bits if they are random (`openssl rand -hex 32` gives 64).
const MinTokenLen = 16

// Auth checks bearer tokens (HTTP `Authorization: Bearer <token>`, gRPC
// metadata `authorization` of the same form) against two token files,
// one token per line (blank lines and lines starting with # ignored):
// client tokens, which may decide, reserve and lease, and admin tokens,
// which may also reset budgets and read the config. Either file may be
// empty (no path):
//
//   - without a client file, the client routes are open;
//   - with either file, the admin routes need an admin token (none are
//     accepted without an admin file).
//
// Tokens are kept as SHA-256 digests, so a lookup takes the same time
// whatever prefix of a token a caller guesses. Watch reads the files
// again when they change (a Kubernetes Secret's symlink swap included);
// a file that no longer reads keeps the tokens it had. Auth is safe for
// concurrent use.
type Auth struct {
	clientPath, adminPath string
	tokens                atomic.Pointer[tokenSets]
	stamp                 string // the files' identity at the last load, for Watch
}

type tokenSets struct {
	client, admin map[[sha256.Size]byte]struct{}
}

// LoadAuth reads the token files; an empty path leaves that scope without
// a file (see Auth). A file that cannot be read, holds no token, or holds
// a token shorter than MinTokenLen or with a space in it is an error
// naming the file and line.
func LoadAuth(clientPath, adminPath string) (*Auth, error) {
	a := &Auth{clientPath: clientPath, adminPath: adminPath}
	if err := a.Reload(); err != nil {
		return nil, err
	}
	a.stamp = fileStamp(a.clientPath, a.adminPath)
	return a, nil
}

// Reload reads both files again; on an error the tokens loaded before
// stay in force.
func (a *Auth) Reload() error {
	var t tokenSets
	var err error
	if t.client, err = readTokens(a.clientPath); err != nil {
		return err
	}
	if t.admin, err = readTokens(a.adminPath); err != nil {
		return err
	}
	a.tokens.Store(&t)
	return nil
}

func readTokens(path string) (map[[sha256.Size]byte]struct{}, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	set := make(map[[sha256.Size]byte]struct{})
	sc := bufio.NewScanner(bytes.NewReader(b))
	for line := 1; sc.Scan(); line++ {
		tok := strings.TrimSpace(sc.Text())
		switch {
		case tok == "" || strings.HasPrefix(tok, "#"):
			continue
		case len(tok) < MinTokenLen:
			return nil, fmt.Errorf("token file %s:%d: a token of %d bytes, want at least %d", path, line, len(tok), MinTokenLen)
		case strings.ContainsAny(tok, " \t"):
			return nil, fmt.Errorf("token file %s:%d: a token holds a space", path, line)
		}
		set[sha256.Sum256([]byte(tok))] = struct{}{}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("token file %s: %w", path, err)
	}
	if len(set) == 0 {
		return nil, fmt.Errorf("token file %s: no token in it", path)
	}
	return set, nil
}

// fileStamp is the size and modification time of each file that paths
// names (an empty path is skipped), as os.Stat sees them through any
// symlink: what Auth.Watch and TLSFiles compare to see a change.
func fileStamp(paths ...string) string {
	var b strings.Builder
	for _, p := range paths {
		if p == "" {
			continue
		}
		if fi, err := os.Stat(p); err == nil {
			fmt.Fprintf(&b, "%d.%d;", fi.Size(), fi.ModTime().UnixNano())
		} else {
			b.WriteString("missing;")
		}
	}
	return b.String()
}

// Watch reloads the files when their size or modification time changes,
// looking every interval, until ctx ends; log hears of each reload and
// of each file that fails to load.
func (a *Auth) Watch(ctx context.Context, every time.Duration, log *slog.Logger) {
	var l loop.Loop
	last := a.stamp
	l.Start(every, func(context.Context) bool {
		stamp := fileStamp(a.clientPath, a.adminPath)
		if stamp == last {
			return true
		}
		last = stamp
		if err := a.Reload(); err != nil {
			log.Error("token files not reloaded; the tokens loaded before stay in force", "error", err)
			return true
		}
		log.Info("token files reloaded")
		return true
	})
	<-ctx.Done()
	l.Stop()
}

var (
	errNoToken   = errors.New("a bearer token is required (Authorization: Bearer <token>)")
	errBadToken  = errors.New("the bearer token is not one of the server's")
	errNotAdmin  = errors.New("this route needs an admin token")
	errNoAdmins  = errors.New("this route needs an admin token, and the server has none (-admin-token-file)")
	errMalformed = errors.New("the Authorization header is not of the form \"Bearer <token>\"")
)

// Allowed returns nil when a caller presenting header (an Authorization
// value, empty when absent) may use a route of scope, else why not and
// whether the answer is unauthenticated (HTTP 401, gRPC Unauthenticated)
// rather than forbidden (403, PermissionDenied). A nil Auth allows
// everything.
func (a *Auth) Allowed(header string, scope Scope) (unauthenticated bool, err error) {
	if a == nil {
		return false, nil
	}
	return a.allowed(header, scope)
}

func (a *Auth) allowed(header string, scope Scope) (unauthenticated bool, err error) {
	t := a.tokens.Load()
	if scope == ScopeOpen || scope == ScopeClient && t.client == nil {
		return false, nil
	}
	if scope == ScopeAdmin && t.admin == nil {
		return false, errNoAdmins
	}
	if header == "" {
		return true, errNoToken
	}
	tok, ok := bearer(header)
	if !ok {
		return true, errMalformed
	}
	sum := sha256.Sum256([]byte(tok))
	if _, ok := t.admin[sum]; ok {
		return false, nil
	}
	if _, ok := t.client[sum]; ok {
		if scope == ScopeClient {
			return false, nil
		}
		return false, errNotAdmin
	}
	return true, errBadToken
}

// bearer is the token of an Authorization value of the Bearer scheme,
// whose name is case-insensitive (RFC 9110 section 11.1: "bearer" and
// "BEARER" are "Bearer"), followed by one space or more.
func bearer(header string) (string, bool) {
	scheme, tok, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimSpace(tok), true
}

// Identity is who a caller presenting header (an Authorization value) is,
// for what it owns: the reservations and leases of the HTTP API are bound
// to it, so that another token can neither settle nor replay them. It is
// the first 16 bytes of the SHA-256 digest of the bearer token, in hex,
// when the token is one of the server's (client or admin); "" when it is
// not, when there is none, and for a nil Auth. A caller that passed a
// route of ScopeClient has an identity whenever the server has client
// tokens; without them (open mode) every caller is "", one tenant.
func (a *Auth) Identity(header string) string {
	tok, ok := bearer(header)
	if a == nil || !ok {
		return ""
	}
	sum := sha256.Sum256([]byte(tok))
	t := a.tokens.Load()
	_, admin := t.admin[sum]
	_, client := t.client[sum]
	if !admin && !client {
		return ""
	}
	return hex.EncodeToString(sum[:16])
}

// IsAdmin reports whether r carries an admin token.
func (a *Auth) IsAdmin(r *http.Request) bool {
	if a == nil {
		return true
	}
	_, err := a.allowed(r.Header.Get("Authorization"), ScopeAdmin)
	return err == nil
}

// gRPC methods every caller may call: health checks.
const grpcHealthPrefix = "/grpc.health.v1.Health/"

func (a *Auth) grpcCheck(method string, md metadata.MD) error {
	if strings.HasPrefix(method, grpcHealthPrefix) {
		return nil
	}
	var header string
	if v := md.Get("authorization"); len(v) > 0 {
		header = v[0]
	}
	unauth, err := a.allowed(header, ScopeClient)
	switch {
	case err == nil:
		return nil
	case unauth:
		return status.Error(codes.Unauthenticated, err.Error())
	default:
		return status.Error(codes.PermissionDenied, err.Error())
	}
}

// GRPCOptions hold every gRPC call but health checks to ScopeClient. The
// check is gRPC's tap handle (grpc.InTapHandle), which runs on the
// connection's reader as a call's headers arrive, before the call has a
// goroutine or reads its message: a call without a valid token is
// answered Unauthenticated at once, so unauthenticated clients cannot
// hold calls open (a unary interceptor would only run once the request
// message had arrived, on a goroutine of its own). A nil Auth has none.
func (a *Auth) GRPCOptions() []grpc.ServerOption {
	if a == nil {
		return nil
	}
	return []grpc.ServerOption{
		grpc.InTapHandle(func(ctx context.Context, info *tap.Info) (context.Context, error) {
			return ctx, a.grpcCheck(info.FullMethodName, info.Header)
		}),
	}
}
