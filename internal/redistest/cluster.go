package redistest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// clusterTimeout bounds `redis-cli --cluster create` and the wait for every
// node to agree afterwards.
const clusterTimeout = 30 * time.Second

// totalSlots is the number of hash slots of a Redis Cluster.
const totalSlots = 16384

// Cluster is a running Redis Cluster on loopback ports.
type Cluster struct {
	// Masters are the nodes that were masters when the cluster started,
	// in slot order: Masters[0] served slot 0.
	Masters []*Server
	// Replicas are the nodes that were replicas when the cluster started,
	// grouped by master: with r replicas per master, Replicas[i*r:(i+1)*r]
	// replicated Masters[i]. Empty by default.
	Replicas []*Server
}

// A ClusterOption configures StartCluster.
type ClusterOption func(*clusterOptions)

type clusterOptions struct {
	masters  int
	replicas int
	node     []Option
}

// WithMasters sets the number of masters, at least 3 (the minimum of
// `redis-cli --cluster create`). The default is 3.
func WithMasters(n int) ClusterOption {
	return func(o *clusterOptions) { o.masters = n }
}

// WithReplicas sets the number of replicas of each master. The default is 0.
func WithReplicas(perMaster int) ClusterOption {
	return func(o *clusterOptions) { o.replicas = perMaster }
}

// WithNodeOptions applies opts to every node, for example a password or
// extra arguments such as WithArgs("--cluster-node-timeout", "500") (the
// default timeout is 2000 ms).
func WithNodeOptions(opts ...Option) ClusterOption {
	return func(o *clusterOptions) { o.node = append(o.node, opts...) }
}

// StartCluster starts the nodes of a Redis Cluster (3 masters and no
// replicas unless told otherwise), joins them with `redis-cli --cluster
// create`, and waits until every node reports cluster_state:ok with all
// 16384 slots served, knows every other node, and every replica's link to
// its master is up. It registers t.Cleanup to stop every node.
func StartCluster(t testing.TB, opts ...ClusterOption) *Cluster {
	t.Helper()
	Require(t)
	co := clusterOptions{masters: 3}
	for _, opt := range opts {
		if opt != nil {
			opt(&co)
		}
	}
	if co.masters < 3 || co.replicas < 0 {
		t.Fatalf("redistest: StartCluster: %d masters with %d replicas each: want at least 3 masters and no negative replicas", co.masters, co.replicas)
	}
	o := newOptions(co.node)
	nodes := make([]*Server, co.masters*(1+co.replicas))
	for i := range nodes {
		nodes[i] = newServer(t, o, true, func(s *Server, port int) ([]string, error) {
			return dataArgs(port, s.Dir, o, true), nil
		})
	}
	if err := startAll(t.Context(), nodes); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(t.Context(), clusterTimeout)
	defer cancel()
	c, err := createCluster(ctx, nodes, co.replicas)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// startAll starts the servers at once on fresh ports, which it chooses
// together so that no two nodes pick each other's port or bus port.
func startAll(ctx context.Context, servers []*Server) error {
	ports, err := freePorts(len(servers), servers[0].bus)
	if err != nil {
		return err
	}
	errs := make([]error, len(servers))
	var wg sync.WaitGroup
	for i, s := range servers {
		wg.Go(func() {
			if errs[i] = s.setPort(ports[i]); errs[i] != nil {
				return
			}
			errs[i] = s.start(ctx)
			if errors.Is(errs[i], errAddrInUse) {
				errs[i] = s.startFresh(ctx)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// createCluster joins the started nodes into a cluster and waits until it
// is ready.
func createCluster(ctx context.Context, nodes []*Server, replicas int) (*Cluster, error) {
	args := []string{"--cluster", "create"}
	for _, n := range nodes {
		args = append(args, n.Addr)
	}
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	n0 := nodes[0]
	if out, err := n0.runCLI(ctx, args); err != nil {
		return nil, fmt.Errorf("redistest: create cluster: %w\n%s", err, out)
	}

	ready := func() error {
		for _, n := range nodes {
			info, err := n.CLI(ctx, "CLUSTER", "INFO")
			if err != nil {
				return err
			}
			fields := infoFields(info)
			for k, want := range map[string]string{
				"cluster_state":          "ok",
				"cluster_slots_assigned": strconv.Itoa(totalSlots),
				"cluster_slots_ok":       strconv.Itoa(totalSlots),
				"cluster_known_nodes":    strconv.Itoa(len(nodes)),
			} {
				if got := fields[k]; got != want {
					return fmt.Errorf("%s: CLUSTER INFO %s:%s, want %s", n.Addr, k, got, want)
				}
			}
		}
		return nil
	}
	if err := poll(ctx, ready); err != nil {
		return nil, fmt.Errorf("redistest: cluster not ready: %w", err)
	}

	// Every node is in, but the replicas' choice of master may still be
	// on its way through the gossip: read the roles until they add up.
	var c *Cluster
	arranged := func() error {
		out, err := n0.CLI(ctx, "CLUSTER", "NODES")
		if err != nil {
			return err
		}
		infos, err := parseClusterNodes(out)
		if err != nil {
			return err
		}
		if c, err = arrange(nodes, infos, replicas); err != nil {
			return err
		}
		return linksUp(ctx, c.Replicas)
	}
	if err := poll(ctx, arranged); err != nil {
		return nil, fmt.Errorf("redistest: cluster replicas not in sync: %w", err)
	}
	return c, nil
}

// arrange sorts the nodes into masters in slot order and replicas grouped
// by master.
func arrange(nodes []*Server, infos []clusterNode, replicas int) (*Cluster, error) {
	byAddr := make(map[string]*Server, len(nodes))
	for _, n := range nodes {
		byAddr[n.Addr] = n
	}
	var masters []clusterNode
	for _, info := range infos {
		if info.master() {
			masters = append(masters, info)
		}
	}
	slices.SortFunc(masters, func(a, b clusterNode) int { return a.firstSlot() - b.firstSlot() })
	c := &Cluster{}
	for _, m := range masters {
		s, ok := byAddr[m.addr]
		if !ok {
			return nil, fmt.Errorf("CLUSTER NODES names unknown master %s", m.addr)
		}
		c.Masters = append(c.Masters, s)
		var mine []*Server
		for _, info := range infos {
			if info.masterID == m.id {
				r, ok := byAddr[info.addr]
				if !ok {
					return nil, fmt.Errorf("CLUSTER NODES names unknown replica %s", info.addr)
				}
				mine = append(mine, r)
			}
		}
		if len(mine) != replicas {
			return nil, fmt.Errorf("master %s has %d replicas, want %d", m.addr, len(mine), replicas)
		}
		c.Replicas = append(c.Replicas, mine...)
	}
	if got := len(c.Masters) + len(c.Replicas); got != len(nodes) {
		return nil, fmt.Errorf("CLUSTER NODES shows %d masters and replicas, want %d", got, len(nodes))
	}
	return c, nil
}

// Addrs returns the address of every node, masters first: a seed list for
// a cluster client.
func (c *Cluster) Addrs() []string {
	var addrs []string
	for _, s := range c.Masters {
		addrs = append(addrs, s.Addr)
	}
	for _, s := range c.Replicas {
		addrs = append(addrs, s.Addr)
	}
	return addrs
}

// MasterFor returns the node that serves key now, as the first node that
// answers sees it: after a failover that may be one of Replicas.
func (c *Cluster) MasterFor(ctx context.Context, key string) (*Server, error) {
	var errs []error
	for _, n := range append(slices.Clone(c.Masters), c.Replicas...) {
		s, err := c.masterFor(ctx, n, key)
		if err == nil {
			return s, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("redistest: master for key %q: %w", key, errors.Join(errs...))
}

func (c *Cluster) masterFor(ctx context.Context, n *Server, key string) (*Server, error) {
	out, err := n.CLI(ctx, "CLUSTER", "KEYSLOT", key)
	if err != nil {
		return nil, err
	}
	slot, err := strconv.Atoi(out)
	if err != nil {
		return nil, fmt.Errorf("CLUSTER KEYSLOT: %q is not a slot", out)
	}
	out, err = n.CLI(ctx, "CLUSTER", "NODES")
	if err != nil {
		return nil, err
	}
	infos, err := parseClusterNodes(out)
	if err != nil {
		return nil, err
	}
	for _, info := range infos {
		if !info.master() || !info.serves(slot) {
			continue
		}
		for _, s := range append(slices.Clone(c.Masters), c.Replicas...) {
			if s.Addr == info.addr {
				return s, nil
			}
		}
		return nil, fmt.Errorf("slot %d is served by %s, not a node of this cluster", slot, info.addr)
	}
	return nil, fmt.Errorf("%s: no master serves slot %d", n.Addr, slot)
}

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	id       string
	addr     string // ip:port, without the bus port
	flags    []string
	masterID string // "" for a master
	slots    [][2]int
}

func (n clusterNode) master() bool { return slices.Contains(n.flags, "master") }

func (n clusterNode) firstSlot() int {
	if len(n.slots) == 0 {
		return totalSlots
	}
	return n.slots[0][0]
}

func (n clusterNode) serves(slot int) bool {
	for _, r := range n.slots {
		if r[0] <= slot && slot <= r[1] {
			return true
		}
	}
	return false
}

// parseClusterNodes reads the reply of CLUSTER NODES:
// <id> <ip:port@cport[,hostname]> <flags> <master> <ping-sent> <pong-recv>
// <config-epoch> <link-state> <slot> <slot> ...
func parseClusterNodes(out string) ([]clusterNode, error) {
	var nodes []clusterNode
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) < 8 {
			return nil, fmt.Errorf("CLUSTER NODES: short line %q", line)
		}
		addr, _, _ := strings.Cut(f[1], "@")
		n := clusterNode{id: f[0], addr: addr, flags: strings.Split(f[2], ",")}
		if f[3] != "-" {
			n.masterID = f[3]
		}
		for _, s := range f[8:] {
			if strings.HasPrefix(s, "[") {
				continue // a slot being imported or migrated
			}
			lo, hi, isRange := strings.Cut(s, "-")
			if !isRange {
				hi = lo
			}
			a, errA := strconv.Atoi(lo)
			b, errB := strconv.Atoi(hi)
			if errA != nil || errB != nil {
				return nil, fmt.Errorf("CLUSTER NODES: bad slot %q in line %q", s, line)
			}
			n.slots = append(n.slots, [2]int{a, b})
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}

// infoFields reads the key:value lines of INFO or CLUSTER INFO.
func infoFields(out string) map[string]string {
	fields := make(map[string]string)
	for line := range strings.Lines(out) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			fields[k] = v
		}
	}
	return fields
}

// linksUp checks that every replica's link to its master is up.
func linksUp(ctx context.Context, replicas []*Server) error {
	for _, r := range replicas {
		out, err := r.CLI(ctx, "INFO", "replication")
		if err != nil {
			return err
		}
		if got := infoFields(out)["master_link_status"]; got != "up" {
			return fmt.Errorf("%s: master_link_status:%s, want up", r.Addr, got)
		}
	}
	return nil
}

// poll calls check every 20 ms until it returns nil or ctx ends, and then
// returns check's last error.
func poll(ctx context.Context, check func() error) error {
	ticker := time.NewTicker(20 * time.Millisecond)
	defer ticker.Stop()
	for {
		err := check()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last check: %w)", ctx.Err(), err)
		case <-ticker.C:
		}
	}
}

// Failover makes replica, a replica of one of c's masters, take over its
// master's slots with a coordinated CLUSTER FAILOVER, and returns once the
// replica reports role:master. Redis abandons a manual failover its
// master does not hand over within 5 s (a replica still catching up after
// a pause, a machine busy with other tests), so the command is sent again
// every 6 s until the replica takes over or ctx ends.
func (c *Cluster) Failover(ctx context.Context, replica *Server) error {
	if !slices.Contains(c.Replicas, replica) {
		return fmt.Errorf("redistest: failover: %s is not a replica of this cluster", replica.Addr)
	}
	var err error
	for ctx.Err() == nil {
		// The replica must be in sync to be handed the slots.
		if err = poll(ctx, func() error { return linksUp(ctx, []*Server{replica}) }); err != nil {
			break
		}
		if _, err = replica.CLI(ctx, "CLUSTER", "FAILOVER"); err != nil {
			break
		}
		attempt, cancel := context.WithTimeout(ctx, 6*time.Second)
		err = poll(attempt, func() error {
			out, err := replica.CLI(attempt, "INFO", "replication")
			if err != nil {
				return err
			}
			if role := infoFields(out)["role"]; role != "master" {
				return fmt.Errorf("%s: role:%s, want master", replica.Addr, role)
			}
			return nil
		})
		cancel()
		if err == nil {
			return nil
		}
	}
	return fmt.Errorf("redistest: failover to %s: %w", replica.Addr, err)
}
