package redistest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestReplica checks that Replica returns a linked replica of its master,
// which receives the master's writes.
func TestReplica(t *testing.T) {
	m := Standalone(t)
	r := Replica(t, m)
	if out := r.MustCLI(t, "INFO", "replication"); !strings.Contains(out, "role:slave") || !strings.Contains(out, "master_link_status:up") {
		t.Fatalf("the replica's INFO replication: %q", out)
	}
	if out := m.MustCLI(t, "SET", "k", "v"); strings.TrimSpace(out) != "OK" {
		t.Fatalf("SET: %q", out)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	err := poll(ctx, func() error {
		if out, err := r.CLI(ctx, "GET", "k"); err != nil || strings.TrimSpace(out) != "v" {
			return fmt.Errorf("GET k on the replica: %q %v", out, err)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

// TestReplicaTLS checks that the replica of a TLS master links to it over
// TLS (Replica fails the test if the link does not come up).
func TestReplicaTLS(t *testing.T) {
	m := Standalone(t, WithTLS(NewCerts(t), ClientCertRequired))
	r := Replica(t, m)
	if r.TLS == nil {
		t.Error("the replica of a TLS master does not speak TLS")
	}
}

// TestSentinelReplicas starts a Sentinel deployment with two replicas,
// which every sentinel must list with its link up (StartSentinel fails the
// test otherwise).
func TestSentinelReplicas(t *testing.T) {
	d := StartSentinel(t, WithSentinelReplicas(2))
	if len(d.Replicas) != 2 || d.Replica != d.Replicas[0] {
		t.Fatalf("Replicas %v, Replica %v", d.Replicas, d.Replica)
	}
	for _, r := range d.Replicas {
		if out := r.MustCLI(t, "INFO", "replication"); !strings.Contains(out, "master_port:"+fmt.Sprint(d.Master.Port)) {
			t.Errorf("%s does not replicate the master: %s", r.Addr, out)
		}
	}
}
