package redistest_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// pingWithin pings s and gives up after d.
func pingWithin(t *testing.T, s *redistest.Server, d time.Duration) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	out, err := s.CLI(ctx, "PING")
	if err == nil && out != "PONG" {
		err = fmt.Errorf("PING: got %q, want PONG", out)
	}
	return err
}

func TestStandalone(t *testing.T) {
	t.Parallel()
	start := time.Now()
	s := redistest.Standalone(t)
	t.Logf("standalone up in %v", time.Since(start))

	if got, want := s.Addr, net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port)); got != want {
		t.Errorf("Addr = %q, want %q", got, want)
	}
	if got, want := s.MustCLI(t, "PING"), "PONG"; got != want {
		t.Errorf("PING = %q, want %q", got, want)
	}
	s.MustCLI(t, "SET", "k", "v w")
	if got, want := s.MustCLI(t, "GET", "k"), "v w"; got != want {
		t.Errorf("GET k = %q, want %q", got, want)
	}
	for param, value := range map[string]string{"save": "", "appendonly": "no", "bind": "127.0.0.1"} {
		if got, want := s.MustCLI(t, "CONFIG", "GET", param), strings.TrimSpace(param+"\n"+value); got != want {
			t.Errorf("CONFIG GET %s = %q, want %q", param, got, want)
		}
	}
	if _, err := s.CLI(t.Context(), "NOSUCHCOMMAND"); err == nil {
		t.Error("CLI NOSUCHCOMMAND: no error for an error reply")
	}
}

func TestStandaloneWithArgs(t *testing.T) {
	t.Parallel()
	s := redistest.Standalone(t, redistest.WithArgs("--maxmemory", "1mb", "--maxmemory-policy", "noeviction"))
	if got, want := s.MustCLI(t, "CONFIG", "GET", "maxmemory"), "maxmemory\n1048576"; got != want {
		t.Errorf("CONFIG GET maxmemory = %q, want %q", got, want)
	}
	if got, want := s.MustCLI(t, "CONFIG", "GET", "maxmemory-policy"), "maxmemory-policy\nnoeviction"; got != want {
		t.Errorf("CONFIG GET maxmemory-policy = %q, want %q", got, want)
	}
}

func TestPassword(t *testing.T) {
	t.Parallel()
	s := redistest.Standalone(t, redistest.WithPassword("s3cret pw"))
	if got, want := s.MustCLI(t, "PING"), "PONG"; got != want {
		t.Errorf("PING with password = %q, want %q", got, want)
	}
	out, err := exec.CommandContext(t.Context(), "redis-cli", "-p", strconv.Itoa(s.Port), "PING").CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "NOAUTH") {
		t.Errorf("PING without password = %q, want NOAUTH", out)
	}
}

func TestUser(t *testing.T) {
	t.Parallel()
	s := redistest.Standalone(t, redistest.WithUser("alice", "pw"), redistest.WithArgs("--user", "default", "off"))
	if got, want := s.MustCLI(t, "ACL", "WHOAMI"), "alice"; got != want {
		t.Errorf("ACL WHOAMI = %q, want %q", got, want)
	}
	out, err := exec.CommandContext(t.Context(), "redis-cli", "-p", strconv.Itoa(s.Port), "PING").CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "NOAUTH") {
		t.Errorf("PING as the disabled default user = %q, want NOAUTH", out)
	}
}

func TestStopIsIdempotent(t *testing.T) {
	t.Parallel()
	s := redistest.Standalone(t)
	for i := range 2 {
		if err := s.Stop(); err != nil {
			t.Fatalf("Stop #%d: %v", i+1, err)
		}
	}
	if err := pingWithin(t, s, 2*time.Second); err == nil {
		t.Error("PING after Stop succeeded")
	}
	if err := s.Kill(); err != nil {
		t.Errorf("Kill after Stop: %v", err)
	}
}

func TestKillRestart(t *testing.T) {
	t.Parallel()
	s := redistest.Standalone(t)
	port := s.Port
	s.MustCLI(t, "SET", "k", "v")

	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := pingWithin(t, s, 2*time.Second); err == nil {
		t.Fatal("PING after Kill succeeded")
	}
	if err := s.Kill(); err != nil {
		t.Errorf("second Kill: %v", err)
	}

	start := time.Now()
	if err := s.Restart(t); err != nil {
		t.Fatal(err)
	}
	t.Logf("restart in %v", time.Since(start))
	if got, want := s.Port, port; got != want {
		t.Errorf("Port after Restart = %d, want %d", got, want)
	}
	if err := pingWithin(t, s, 2*time.Second); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
	if got, want := s.MustCLI(t, "EXISTS", "k"), "0"; got != want {
		t.Errorf("EXISTS k after a restart without persistence = %s, want %s", got, want)
	}

	// Restart of a running server stops it first.
	if err := s.Restart(t); err != nil {
		t.Fatalf("Restart while running: %v", err)
	}
	if err := pingWithin(t, s, 2*time.Second); err != nil {
		t.Fatalf("PING after second Restart: %v", err)
	}
}

func TestPauseResume(t *testing.T) {
	t.Parallel()
	s := redistest.Standalone(t)
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	err := pingWithin(t, s, 300*time.Millisecond)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("PING while paused: got %v, want a deadline error", err)
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := pingWithin(t, s, 2*time.Second); err != nil {
		t.Errorf("PING after Resume: %v", err)
	}

	// A paused server still stops.
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(); err != nil {
		t.Errorf("Stop while paused: %v", err)
	}
	if err := s.Pause(); err == nil {
		t.Error("Pause after Stop: no error")
	}
}

func TestCluster(t *testing.T) {
	t.Parallel()
	start := time.Now()
	c := redistest.StartCluster(t)
	t.Logf("cluster of 3 masters up in %v", time.Since(start))

	if got, want := len(c.Masters), 3; got != want {
		t.Fatalf("%d masters, want %d", got, want)
	}
	if got, want := len(c.Replicas), 0; got != want {
		t.Errorf("%d replicas, want %d", got, want)
	}
	if got, want := len(c.Addrs()), 3; got != want {
		t.Errorf("%d addresses, want %d", got, want)
	}
	for _, m := range c.Masters {
		info := m.MustCLI(t, "CLUSTER", "INFO")
		for _, want := range []string{"cluster_state:ok", "cluster_slots_ok:16384"} {
			if !strings.Contains(info, want) {
				t.Errorf("%s: CLUSTER INFO lacks %s:\n%s", m.Addr, want, info)
			}
		}
	}

	// One key on each master, written through the first and read through
	// the last, following redirections.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	keyOn := make(map[*redistest.Server]string)
	for i := 0; len(keyOn) < len(c.Masters); i++ {
		if i > 1000 {
			t.Fatalf("1000 keys landed on only %d masters", len(keyOn))
		}
		key := fmt.Sprintf("key:%d", i)
		m, err := c.MasterFor(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := keyOn[m]; !ok {
			keyOn[m] = key
		}
	}
	first, last := c.Masters[0], c.Masters[len(c.Masters)-1]
	for m, key := range keyOn {
		first.MustCLI(t, "-c", "SET", key, "value of "+key)
		if got, want := last.MustCLI(t, "-c", "GET", key), "value of "+key; got != want {
			t.Errorf("GET %s through %s = %q, want %q", key, last.Addr, got, want)
		}
		if got, want := m.MustCLI(t, "GET", key), "value of "+key; got != want {
			t.Errorf("GET %s on its master %s = %q, want %q", key, m.Addr, got, want)
		}
		if got, want := m.MustCLI(t, "DBSIZE"), "1"; got != want {
			t.Errorf("DBSIZE on %s = %s, want %s", m.Addr, got, want)
		}
	}

	// A killed master restarted on its port and directory takes its slots
	// back from nodes.conf.
	m := c.Masters[1]
	if err := m.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := m.Restart(t); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, n := range c.Masters {
		for {
			info := n.MustCLI(t, "CLUSTER", "INFO")
			if strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:3") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: cluster not ok 10 s after restarting %s:\n%s", n.Addr, m.Addr, info)
			}
			<-time.After(20 * time.Millisecond)
		}
	}
	ctx, cancel = context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if got, err := c.MasterFor(ctx, keyOn[m]); err != nil || got != m {
		t.Errorf("after restart, MasterFor(%q) = %v, %v; want %s", keyOn[m], got, err, m.Addr)
	}
}

func TestClusterWithReplicas(t *testing.T) {
	t.Parallel()
	start := time.Now()
	c := redistest.StartCluster(t, redistest.WithReplicas(1))
	t.Logf("cluster of 3 masters and 3 replicas up in %v", time.Since(start))

	if got, want := len(c.Replicas), 3; got != want {
		t.Fatalf("%d replicas, want %d", got, want)
	}
	if got, want := len(c.Addrs()), 6; got != want {
		t.Errorf("%d addresses, want %d", got, want)
	}
	for i, r := range c.Replicas {
		role := strings.Fields(r.MustCLI(t, "ROLE"))
		if len(role) < 3 || role[0] != "slave" || role[2] != strconv.Itoa(c.Masters[i].Port) {
			t.Errorf("ROLE of Replicas[%d] = %q, want slave of port %d", i, role, c.Masters[i].Port)
		}
	}
}

func TestSentinel(t *testing.T) {
	t.Parallel()
	start := time.Now()
	d := redistest.StartSentinel(t)
	t.Logf("sentinel set up in %v", time.Since(start))

	if got, want := len(d.SentinelAddrs()), 3; got != want {
		t.Fatalf("%d sentinels, want %d", got, want)
	}
	for _, s := range d.Sentinels {
		got := strings.Fields(s.MustCLI(t, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", d.MasterName))
		if want := []string{"127.0.0.1", strconv.Itoa(d.Master.Port)}; strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%s: master address %q, want %q", s.Addr, got, want)
		}
	}
	if got, want := strings.Fields(d.Replica.MustCLI(t, "ROLE"))[0], "slave"; got != want {
		t.Errorf("replica ROLE = %q, want %q", got, want)
	}
	d.Master.MustCLI(t, "SET", "k", "v")
	d.Master.MustCLI(t, "WAIT", "1", "5000")
	if got, want := d.Replica.MustCLI(t, "GET", "k"), "v"; got != want {
		t.Errorf("GET k on the replica = %q, want %q", got, want)
	}
}

// tlsPing sends PING over a new TLS connection made with conf and wants
// +PONG, within 2 s.
func tlsPing(t *testing.T, addr string, conf *tls.Config) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	d := tls.Dialer{Config: conf}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	deadline, _ := ctx.Deadline()
	if err := conn.SetDeadline(deadline); err != nil {
		return err
	}
	if _, err := conn.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING: %q", line)
	}
	return nil
}

func TestTLS(t *testing.T) {
	t.Parallel()
	certs := redistest.NewCerts(t)
	for _, tc := range []struct {
		auth         redistest.ClientAuth
		withoutCert  bool // whether a client without a certificate gets in
		strangerCert bool // whether one with a certificate of another CA does
	}{
		{redistest.ClientCertRequired, false, false},
		{redistest.ClientCertOptional, true, false},
		{redistest.ClientCertNone, true, true},
	} {
		t.Run(string(tc.auth), func(t *testing.T) {
			t.Parallel()
			s := redistest.Standalone(t, redistest.WithTLS(certs, tc.auth))
			if s.TLS != certs {
				t.Errorf("Server.TLS = %p, want the Certs of WithTLS %p", s.TLS, certs)
			}
			if got, want := s.MustCLI(t, "PING"), "PONG"; got != want {
				t.Errorf("PING through CLI = %q, want %q", got, want)
			}
			if got, want := s.MustCLI(t, "CONFIG", "GET", "port"), "port\n0"; got != want {
				t.Errorf("CONFIG GET port = %q, want %q: a plain port is open", got, want)
			}
			if got, want := s.MustCLI(t, "CONFIG", "GET", "tls-port"), "tls-port\n"+strconv.Itoa(s.Port); got != want {
				t.Errorf("CONFIG GET tls-port = %q, want %q", got, want)
			}
			if err := tlsPing(t, s.Addr, certs.ClientConfig()); err != nil {
				t.Errorf("PING with the client certificate: %v", err)
			}
			noCert := &tls.Config{RootCAs: certs.Pool()}
			if err := tlsPing(t, s.Addr, noCert); (err == nil) != tc.withoutCert {
				t.Errorf("PING without a client certificate: %v, want success %v", err, tc.withoutCert)
			}
			stranger := redistest.NewCerts(t).ClientConfig()
			stranger.RootCAs = certs.Pool()
			if err := tlsPing(t, s.Addr, stranger); (err == nil) != tc.strangerCert {
				t.Errorf("PING with a certificate of another CA: %v, want success %v", err, tc.strangerCert)
			}
			if err := tlsPing(t, s.Addr, &tls.Config{}); err == nil {
				t.Error("PING trusting the system roots succeeded: the server certificate is not the test CA's")
			}
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
			defer cancel()
			if out, err := exec.CommandContext(ctx, "redis-cli", "-p", strconv.Itoa(s.Port), "PING").CombinedOutput(); err == nil && strings.Contains(string(out), "PONG") {
				t.Errorf("PING without TLS = %q, want a failure", out)
			}
		})
	}
}

// TestTLSCluster starts a cluster whose nodes speak TLS to clients, to
// their replicas and to each other on the cluster bus.
func TestTLSCluster(t *testing.T) {
	t.Parallel()
	certs := redistest.NewCerts(t)
	c := redistest.StartCluster(t, redistest.WithReplicas(1), redistest.WithNodeOptions(redistest.WithTLS(certs, redistest.ClientCertRequired)))
	for _, n := range append(c.Masters, c.Replicas...) {
		if got, want := n.MustCLI(t, "CONFIG", "GET", "tls-cluster"), "tls-cluster\nyes"; got != want {
			t.Errorf("%s: CONFIG GET tls-cluster = %q, want %q", n.Addr, got, want)
		}
	}
	c.Masters[0].MustCLI(t, "-c", "SET", "k", "v")
	if got, want := c.Masters[2].MustCLI(t, "-c", "GET", "k"), "v"; got != want {
		t.Errorf("GET k through another master = %q, want %q", got, want)
	}
}

// TestTLSSentinel starts a Sentinel set that speaks only TLS: the
// sentinels find the master, its replica and each other over it.
func TestTLSSentinel(t *testing.T) {
	t.Parallel()
	certs := redistest.NewCerts(t)
	d := redistest.StartSentinel(t, redistest.WithSentinelTLS(certs))
	for _, s := range append([]*redistest.Server{d.Master, d.Replica}, d.Sentinels...) {
		if s.TLS != certs {
			t.Errorf("%s: Server.TLS = %p, want %p", s.Addr, s.TLS, certs)
		}
		// A sentinel has no CONFIG GET: try plain TCP instead.
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		out, err := exec.CommandContext(ctx, "redis-cli", "-p", strconv.Itoa(s.Port), "PING").CombinedOutput()
		cancel()
		if err == nil && strings.Contains(string(out), "PONG") {
			t.Errorf("%s: PING without TLS = %q, want a failure", s.Addr, out)
		}
	}
	d.Master.MustCLI(t, "SET", "k", "v")
	d.Master.MustCLI(t, "WAIT", "1", "5000")
	if got, want := d.Replica.MustCLI(t, "GET", "k"), "v"; got != want {
		t.Errorf("GET k on the replica = %q, want %q", got, want)
	}
}
