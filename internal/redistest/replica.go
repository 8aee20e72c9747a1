package redistest

import (
	"context"
	"strconv"
	"testing"
)

// Replica starts a standalone server replicating master (REPLICAOF at
// start) and returns once its link to master is up, so that a WAIT on
// master counts it. opts apply to the replica; it authenticates to master
// as WithPassword or WithUser say, which master must then accept. The
// replica of a TLS master speaks TLS with master's certificates, unless
// opts say otherwise.
func Replica(t testing.TB, master *Server, opts ...Option) *Server {
	t.Helper()
	Require(t)
	base := []Option{WithArgs("--replicaof", "127.0.0.1", strconv.Itoa(master.Port))}
	if master.TLS != nil {
		base = append(base, WithTLS(master.TLS, ClientCertRequired))
	}
	o := newOptions(append(base, opts...))
	r := newServer(t, o, false, func(s *Server, port int) ([]string, error) {
		return dataArgs(port, s.Dir, o, false), nil
	})
	ctx, cancel := context.WithTimeout(t.Context(), sentinelTimeout)
	defer cancel()
	if err := r.startFresh(ctx); err != nil {
		t.Fatal(err)
	}
	if err := poll(ctx, func() error { return linksUp(ctx, []*Server{r}) }); err != nil {
		t.Fatalf("redistest: replica of %s not in sync: %v", master.Addr, err)
	}
	return r
}
