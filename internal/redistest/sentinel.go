package redistest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// sentinelTimeout bounds the wait for the replica to sync and for the
// sentinels to find each other.
const sentinelTimeout = 30 * time.Second

// MasterName is the name the sentinels of StartSentinel monitor.
const MasterName = "mymaster"

// Sentinel is a running Sentinel deployment: one master, one replica (or
// more, WithSentinelReplicas) and three sentinels with quorum 2.
type Sentinel struct {
	// Master and Replica are the data nodes' roles when it started; after a
	// failover they are swapped. Replica is Replicas[0].
	Master  *Server
	Replica *Server
	// Replicas are every replica, in the order they started.
	Replicas []*Server
	// Sentinels are the three sentinel processes.
	Sentinels []*Server
	// MasterName is the name the sentinels monitor: "mymaster".
	MasterName string
}

// SentinelOption configures StartSentinel.
type SentinelOption func(*sentinelOptions)

type sentinelOptions struct {
	downAfter time.Duration
	tls       *Certs
	replicas  int
}

// WithSentinelReplicas starts n replicas of the master instead of one
// (n < 1 means 1).
func WithSentinelReplicas(n int) SentinelOption {
	return func(o *sentinelOptions) { o.replicas = n }
}

// WithSentinelTLS makes every process speak TLS only, with certs, as
// WithTLS(certs, ClientCertRequired) does for a data node: the master and
// the replica, and the sentinels to clients, to each other and to the
// data nodes.
func WithSentinelTLS(certs *Certs) SentinelOption {
	return func(o *sentinelOptions) { o.tls = certs }
}

// WithDownAfter sets the sentinels' down-after-milliseconds: how long the
// master must stay unreachable before they fail it over. The default, 1 s,
// lets failover tests finish in seconds; tests that must not see a failover
// (a conformance run on a loaded machine, where the master can stall past a
// second) give a long one, since a failover loses the counts written since
// the last replication.
func WithDownAfter(d time.Duration) SentinelOption {
	return func(o *sentinelOptions) { o.downAfter = d }
}

// StartSentinel starts a master, a replica of it, and three sentinels that
// monitor it as "mymaster" with quorum 2, down-after-milliseconds 1000
// (WithDownAfter changes it) and failover-timeout 3000, so failover tests
// finish in seconds. It waits until
// the replica is in sync and every sentinel names the master, sees the
// replica connected, and knows the other two sentinels, so a failover can
// be authorized from the start. It registers t.Cleanup to stop everything.
func StartSentinel(t testing.TB, opts ...SentinelOption) *Sentinel {
	t.Helper()
	Require(t)
	so := sentinelOptions{downAfter: time.Second}
	for _, opt := range opts {
		opt(&so)
	}
	ctx, cancel := context.WithTimeout(t.Context(), sentinelTimeout)
	defer cancel()
	d := &Sentinel{MasterName: MasterName}

	var o options
	if so.tls != nil {
		o = newOptions([]Option{WithTLS(so.tls, ClientCertRequired)})
	}
	d.Master = newServer(t, o, false, func(s *Server, port int) ([]string, error) {
		return dataArgs(port, s.Dir, o, false), nil
	})
	if err := d.Master.startFresh(ctx); err != nil {
		t.Fatal(err)
	}
	replicaOf := WithArgs("--replicaof", "127.0.0.1", strconv.Itoa(d.Master.Port))
	ro := newOptions([]Option{replicaOf})
	ro.tls, ro.clientAuth = o.tls, o.clientAuth
	for range max(so.replicas, 1) {
		r := newServer(t, ro, false, func(s *Server, port int) ([]string, error) {
			return dataArgs(port, s.Dir, ro, false), nil
		})
		if err := r.startFresh(ctx); err != nil {
			t.Fatal(err)
		}
		d.Replicas = append(d.Replicas, r)
	}
	d.Replica = d.Replicas[0]
	// Sentinels learn replicas from the master's INFO, which they ask for
	// on connecting and then only every 10 s: start them once the master
	// lists its replicas.
	if err := poll(ctx, func() error { return linksUp(ctx, d.Replicas) }); err != nil {
		t.Fatalf("redistest: sentinel replica not in sync: %v", err)
	}

	for range 3 {
		d.Sentinels = append(d.Sentinels, newServer(t, options{tls: so.tls}, false, func(s *Server, port int) ([]string, error) {
			return sentinelArgs(s.Dir, port, d.Master.Port, so.downAfter, so.tls)
		}))
	}
	if err := startAll(ctx, d.Sentinels); err != nil {
		t.Fatal(err)
	}
	if err := poll(ctx, d.agreed(ctx)); err != nil {
		t.Fatalf("redistest: sentinels not ready: %v", err)
	}
	return d
}

// sentinelArgs writes a sentinel's configuration file, which the sentinel
// rewrites as it learns, and returns the command line that runs it.
func sentinelArgs(dir string, port, masterPort int, downAfter time.Duration, certs *Certs) ([]string, error) {
	conf := filepath.Join(dir, confName)
	listen := fmt.Sprintf("port %d\n", port)
	if certs != nil {
		// tls-replication makes a sentinel reach the data nodes, and the
		// other sentinels, over TLS, and announce its TLS port.
		listen = fmt.Sprintf("port 0\ntls-port %d\ntls-cert-file %q\ntls-key-file %q\ntls-ca-cert-file %q\ntls-auth-clients yes\ntls-replication yes\n",
			port, certs.ServerCertFile, certs.ServerKeyFile, certs.CAFile)
	}
	text := listen + fmt.Sprintf(`bind 127.0.0.1
protected-mode no
daemonize no
dir %q
logfile %q
sentinel monitor %s 127.0.0.1 %d 2
sentinel down-after-milliseconds %[3]s %[5]d
sentinel failover-timeout %[3]s 3000
sentinel parallel-syncs %[3]s 1
`, dir, filepath.Join(dir, logName), MasterName, masterPort, downAfter.Milliseconds())
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		return nil, fmt.Errorf("redistest: write sentinel config: %w", err)
	}
	return []string{conf, "--sentinel"}, nil
}

// agreed returns a check that every sentinel names the master, sees the
// replica with its link up, and knows the other sentinels.
func (d *Sentinel) agreed(ctx context.Context) func() error {
	return func() error {
		for _, s := range d.Sentinels {
			out, err := s.CLI(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", d.MasterName)
			if err != nil {
				return err
			}
			if got, want := strings.Join(strings.Fields(out), ":"), d.Master.Addr; got != want {
				return fmt.Errorf("%s: master is %q, want %q", s.Addr, got, want)
			}
			out, err = s.CLI(ctx, "SENTINEL", "MASTER", d.MasterName)
			if err != nil {
				return err
			}
			m := pairs(out)
			if got, want := m["num-other-sentinels"], strconv.Itoa(len(d.Sentinels)-1); got != want {
				return fmt.Errorf("%s: num-other-sentinels %s, want %s", s.Addr, got, want)
			}
			if got := m["flags"]; got != "master" {
				return fmt.Errorf("%s: master flags %q, want master", s.Addr, got)
			}
			out, err = s.CLI(ctx, "SENTINEL", "REPLICAS", d.MasterName)
			if err != nil {
				return err
			}
			seen := map[string]map[string]string{}
			for _, r := range replicaEntries(out) {
				seen[r["name"]] = r
			}
			for _, replica := range d.Replicas {
				r, ok := seen[replica.Addr]
				if !ok {
					return fmt.Errorf("%s: does not list the replica %s", s.Addr, replica.Addr)
				}
				if got := r["flags"]; got != "slave" {
					return fmt.Errorf("%s: replica %s flags %q, want slave", s.Addr, replica.Addr, got)
				}
				if got := r["master-link-status"]; got != "ok" {
					return fmt.Errorf("%s: replica %s master-link-status %q, want ok", s.Addr, replica.Addr, got)
				}
			}
		}
		return nil
	}
}

// replicaEntries reads SENTINEL REPLICAS in redis-cli's raw format: for
// each replica, a flat key, value, … list that starts with "name".
func replicaEntries(out string) []map[string]string {
	var entries []map[string]string
	lines := strings.Split(out, "\n")
	for i := 0; i+1 < len(lines); i += 2 {
		k, v := strings.TrimSpace(lines[i]), strings.TrimSpace(lines[i+1])
		if k == "name" {
			entries = append(entries, map[string]string{})
		}
		if len(entries) > 0 {
			entries[len(entries)-1][k] = v
		}
	}
	return entries
}

// pairs reads a flat key, value, key, value reply in redis-cli's raw
// format, one element per line. A later key overwrites an earlier one.
func pairs(out string) map[string]string {
	lines := strings.Split(out, "\n")
	m := make(map[string]string, len(lines)/2)
	for i := 0; i+1 < len(lines); i += 2 {
		m[strings.TrimSpace(lines[i])] = strings.TrimSpace(lines[i+1])
	}
	return m
}

// SentinelAddrs returns the addresses of the sentinels.
func (d *Sentinel) SentinelAddrs() []string {
	addrs := make([]string, len(d.Sentinels))
	for i, s := range d.Sentinels {
		addrs[i] = s.Addr
	}
	return addrs
}
