package xds

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/xdstest"
	"github.com/floodgate-rl/floodgate/server"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

// never bounds a wait for something that must happen; reaching it fails
// the test (it is not a measure of speed).
const never = time.Minute

// lockedBuffer is a log destination safe for concurrent use.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// rlc is a RateLimitConfig of one domain with one descriptor per key of
// limits, each that many requests per minute.
func rlc(name, domain string, descs ...*rlsconfv3.RateLimitDescriptor) *rlsconfv3.RateLimitConfig {
	return &rlsconfv3.RateLimitConfig{Name: name, Domain: domain, Descriptors: descs}
}

func perMinute(key string, n uint32) *rlsconfv3.RateLimitDescriptor {
	return &rlsconfv3.RateLimitDescriptor{Key: key, RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: n}}
}

// target is what Run applies to: a real server.Server on the memory
// store, fed through ApplyConfig as serve feeds it, with each applied
// config recorded.
type target struct {
	srv     *server.Server
	applied chan *config.Config
}

func newTarget(t *testing.T) *target {
	t.Helper()
	store := memstore.New(nil)
	t.Cleanup(func() { store.Close() })
	srv, err := server.New(server.Options{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	return &target{srv: srv, applied: make(chan *config.Config, 100)}
}

func (tg *target) apply(cfg *config.Config) error {
	if err := tg.srv.ApplyConfig(cfg, "xds"); err != nil {
		return err
	}
	tg.applied <- cfg
	return nil
}

func (tg *target) waitApplied(t *testing.T) *config.Config {
	t.Helper()
	select {
	case cfg := <-tg.applied:
		return cfg
	case <-time.After(never):
		t.Fatal("no config applied")
		return nil
	}
}

// allowed decides one request of domain with one descriptor key=value.
func (tg *target) allowed(t *testing.T, domain, key, value string) bool {
	t.Helper()
	res, err := tg.srv.Decide(t.Context(), domain, []server.Descriptor{{Entries: []config.Entry{{Key: key, Value: value}}}}, 1)
	if err != nil {
		t.Fatal(err)
	}
	return res.Code == server.OK
}

// run starts Run with o (Address, Apply and after filled in when unset)
// until the test ends, and returns the waits it asks for.
func run(t *testing.T, o Options) chan wait {
	t.Helper()
	waits := make(chan wait, 100)
	if o.after == nil {
		o.after = func(d time.Duration) <-chan time.Time {
			w := wait{d: d, fire: make(chan time.Time, 1)}
			waits <- w
			return w.fire
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, o) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return waits
}

// wait is one backoff Run asked for; it ends when fire is sent to.
type wait struct {
	d    time.Duration
	fire chan time.Time
}

func nextWait(t *testing.T, waits chan wait) wait {
	t.Helper()
	select {
	case w := <-waits:
		return w
	case <-time.After(never):
		t.Fatal("Run asked for no backoff")
		return wait{}
	}
}

// TestPushes: a first push applies; a second replaces it whole, in one
// Apply; a bad one is NACKed (the NACK reaches the server, with the
// problems and the last version accepted) and the last good config keeps
// deciding; a good one after it applies again.
func TestPushes(t *testing.T) {
	t.Parallel()
	xs := xdstest.Start(t, nil)
	tg := newTarget(t)
	var rejected []error
	var rmu sync.Mutex
	logs := &lockedBuffer{}
	waits := run(t, Options{Address: xs.Addr, NodeID: "node-1", Cluster: "edge", NodeMetadata: map[string]string{"zone": "a"},
		Headers: map[string]string{"x-tenant": "blue"}, Apply: tg.apply, Logger: slog.New(slog.NewTextHandler(logs, nil)),
		Rejected: func(err error) { rmu.Lock(); rejected = append(rejected, err); rmu.Unlock() }})

	first, _ := xs.Wait(0, "first request", func(*discoveryv3.DiscoveryRequest) bool { return true })
	if n := first.GetNode(); n.GetId() != "node-1" || n.GetCluster() != "edge" || n.GetMetadata().GetFields()["zone"].GetStringValue() != "a" {
		t.Errorf("node %v, want id node-1, cluster edge, metadata zone=a", n)
	}
	if got := first.GetTypeUrl(); got != TypeURL {
		t.Errorf("type %q, want %q", got, TypeURL)
	}
	if got := xs.Streams()[0].Get("x-tenant"); len(got) != 1 || got[0] != "blue" {
		t.Errorf("stream metadata x-tenant %q, want blue", got)
	}

	// 1: applies.
	xs.Push("node-1", "v1", rlc("rl-shop", "shop", perMinute("user", 2)))
	cfg := tg.waitApplied(t)
	_, next := xs.Wait(0, "ACK of v1", xdstest.ACK("v1"))
	if d := cfg.Domain("shop"); d == nil || len(d.Rules()) != 1 || d.Rules()[0].File != "rl-shop" {
		t.Fatalf("v1 applied %v, want domain shop with one rule from rl-shop", cfg.Domains())
	}
	for i, want := range []bool{true, true, false} {
		if got := tg.allowed(t, "shop", "user", "ann"); got != want {
			t.Errorf("v1 request %d: allowed %t, want %t", i+1, got, want)
		}
	}

	// 2: replaces, both resources in one Apply.
	xs.Push("node-1", "v2", rlc("rl-shop", "shop", perMinute("user", 5)), rlc("rl-api", "api", perMinute("path", 1)))
	cfg = tg.waitApplied(t)
	_, next = xs.Wait(next, "ACK of v2", xdstest.ACK("v2"))
	if got := len(cfg.Domains()); got != 2 || cfg.Domain("api") == nil || cfg.Domain("shop").Rules()[0].Limit.Limit != 5 {
		t.Fatalf("v2 applied %d domains %v, want shop (5/min) and api together", got, cfg.Domains())
	}
	if tg.srv.Config() != cfg {
		t.Error("the server does not hold the config applied")
	}
	good := cfg

	// 3: refused. Both problems in the NACK, the version still v2.
	bad := rlc("rl-shop", "shop",
		&rlsconfv3.RateLimitDescriptor{Key: "user", RateLimit: &rlsconfv3.RateLimitPolicy{RequestsPerUnit: 1}},
		perMinute("ip", 1), perMinute("ip", 2))
	xs.Push("node-1", "v3", bad, rlc("rl-api", "api", perMinute("path", 1)))
	n, _ := xs.Wait(next, "NACK of v3", xdstest.NACK)
	if got := n.GetVersionInfo(); got != "v2" {
		t.Errorf("NACK version %q, want the last accepted, v2", got)
	}
	for _, want := range []string{
		"rl-shop: descriptors[0].rate_limit.unit: missing unit",
		`rl-shop: descriptors[2].key: duplicate descriptor: key "ip" without a value is already at this level`,
	} {
		if msg := n.GetErrorDetail().GetMessage(); !strings.Contains(msg, want) {
			t.Errorf("NACK detail %q lacks %q", msg, want)
		}
	}
	rmu.Lock()
	if len(rejected) != 1 {
		t.Errorf("Rejected told of %d pushes, want 1", len(rejected))
	}
	rmu.Unlock()
	select {
	case cfg := <-tg.applied:
		t.Fatalf("v3 applied: %v", cfg.Domains())
	default:
	}
	if tg.srv.Config() != good {
		t.Fatal("the server's config changed on a refused push")
	}
	for i := range 5 {
		if !tg.allowed(t, "shop", "user", "bob") {
			t.Errorf("after the NACK, request %d of 5 denied: the v2 limit no longer decides", i+1)
		}
	}
	if tg.allowed(t, "shop", "user", "bob") {
		t.Error("after the NACK, request 6 of a limit of 5 allowed")
	}

	// go-control-plane's cache sends v3 again as soon as it is NACKed
	// (the NACK names v2): refused again without Apply, Rejected or a log
	// line, its NACK held for the backoff, so the two do not spin.
	w := nextWait(t, waits)
	if w.d < 800*time.Millisecond || w.d > 1200*time.Millisecond {
		t.Errorf("the NACK of a repeat waits %v, want the first backoff, 1s ±20%%", w.d)
	}
	nacks := 0
	for _, r := range xs.Requests() {
		if xdstest.NACK(r) {
			nacks++
		}
	}
	if nacks != 1 {
		t.Errorf("%d NACKs sent before the backoff ended, want 1", nacks)
	}
	rmu.Lock()
	if len(rejected) != 1 {
		t.Errorf("Rejected told of %d pushes, want 1 (a repeat is not told)", len(rejected))
	}
	rmu.Unlock()
	if got := strings.Count(logs.String(), "xds push refused"); got != 1 {
		t.Errorf("%d log lines of the refusal, want 1", got)
	}

	// 4: a good push applies again, once the held NACK asks for it.
	xs.Push("node-1", "v4", rlc("rl-shop", "shop", perMinute("user", 7)))
	w.fire <- time.Time{}
	cfg = tg.waitApplied(t)
	xs.Wait(next, "ACK of v4", xdstest.ACK("v4"))
	if cfg.Domain("api") != nil || cfg.Domain("shop").Rules()[0].Limit.Limit != 7 {
		t.Errorf("v4 applied %v, want shop (7/min) alone", cfg.Domains())
	}
}

// TestApplyRefuses: a push that converts but that Apply refuses is
// NACKed with Apply's error, and the version stays.
func TestApplyRefuses(t *testing.T) {
	t.Parallel()
	xs := xdstest.Start(t, nil)
	calls := make(chan *config.Config, 10)
	waits := run(t, Options{Address: xs.Addr, NodeID: "n", Apply: func(cfg *config.Config) error {
		calls <- cfg
		return errors.New("no room for it")
	}})
	xs.Push("n", "v1", rlc("a", "a", perMinute("k", 1)))
	n, _ := xs.Wait(0, "NACK", xdstest.NACK)
	nextWait(t, waits) // the repeat of v1, its NACK held
	if got, want := n.GetErrorDetail().GetMessage(), "no room for it"; got != want {
		t.Errorf("NACK detail %q, want %q", got, want)
	}
	if n.GetVersionInfo() != "" {
		t.Errorf("NACK version %q, want none accepted", n.GetVersionInfo())
	}
	if len(calls) != 1 {
		t.Errorf("Apply called %d times, want 1 (a repeat is refused without it)", len(calls))
	}
}

// TestReconnect: the server going away is survived. Run waits a backoff
// that grows by Multiplier within ±Jitter up to Max, connects again when
// the server is back (asking for the version it holds), applies the new
// server's push, and starts its backoff over.
func TestReconnect(t *testing.T) {
	t.Parallel()
	xs := xdstest.Start(t, nil)
	tg := newTarget(t)
	b := Backoff{Initial: time.Second, Max: 5 * time.Second, Multiplier: 2, Jitter: 0.25}
	waits := run(t, Options{Address: xs.Addr, NodeID: "n", Apply: tg.apply, Backoff: b})
	xs.Push("n", "v1", rlc("a", "a", perMinute("k", 1)))
	tg.waitApplied(t)
	xs.Wait(0, "ACK of v1", xdstest.ACK("v1"))

	xs.Stop()
	// While the server is down: 1s, 2s, 4s, 5s, 5s, each ±25%.
	for i, base := range []time.Duration{1, 2, 4, 5, 5} {
		w := nextWait(t, waits)
		lo, hi := base*time.Second*3/4, base*time.Second*5/4
		if w.d < lo || w.d > hi {
			t.Errorf("wait %d: %v, want %v to %v", i, w.d, lo, hi)
		}
		if i < 4 {
			w.fire <- time.Time{}
		} else {
			// Back, with a new cache and a new version, before the last
			// wait ends.
			before := len(xs.Requests())
			xs.Restart(xs.Addr)
			xs.Push("n", "v2", rlc("a", "a", perMinute("k", 9)))
			w.fire <- time.Time{}
			first, _ := xs.Wait(before, "request on the new stream", func(r *discoveryv3.DiscoveryRequest) bool { return r.GetResponseNonce() == "" })
			if got := first.GetVersionInfo(); got != "v1" {
				t.Errorf("new stream asks with version %q, want v1, the one held", got)
			}
		}
	}
	cfg := tg.waitApplied(t)
	if got := cfg.Domain("a").Rules()[0].Limit.Limit; got != 9 {
		t.Errorf("after the reconnect: limit %d, want v2's 9", got)
	}
	xs.Stop()
	if w := nextWait(t, waits); w.d > time.Second*5/4 {
		t.Errorf("after a stream that was pushed to, the wait is %v, want the backoff started over (about 1s)", w.d)
	}
}

func TestBackoffDefaults(t *testing.T) {
	t.Parallel()
	b := Backoff{}.withDefaults()
	if b.Initial != time.Second || b.Max != 30*time.Second || b.Multiplier != 1.6 || b.Jitter != 0.2 {
		t.Errorf("defaults %+v", b)
	}
	for _, c := range []struct {
		b    Backoff
		n    int
		r    float64
		want time.Duration
	}{
		{Backoff{Jitter: -1}, 0, 0.9, time.Second},
		{Backoff{Jitter: -1}, 1, 0.9, 1600 * time.Millisecond},
		{Backoff{Jitter: -1}, 1000, 0.9, 30 * time.Second},
		{Backoff{}, 0, 0, 800 * time.Millisecond},
		{Backoff{}, 0, 0.5, time.Second},
		{Backoff{Initial: time.Minute, Max: time.Second, Jitter: -1}, 3, 0, time.Minute},
	} {
		if got := c.b.withDefaults().wait(c.n, c.r); got != c.want {
			t.Errorf("%+v.wait(%d, %v) = %v, want %v", c.b, c.n, c.r, got, c.want)
		}
	}
}

func TestRunNeedsAddressAndApply(t *testing.T) {
	t.Parallel()
	apply := func(*config.Config) error { return nil }
	for _, o := range []Options{{Apply: apply}, {Address: "127.0.0.1:1"}} {
		if err := Run(t.Context(), o); err == nil {
			t.Errorf("Run(%+v): no error", o)
		}
	}
}

// TestTLS: TLS and mutual TLS to the server, with certificates made by the
// test: a client that trusts the server's CA (and, for mTLS, presents a
// certificate of the CA the server trusts) gets the push; one that trusts
// another CA, or that has no certificate for a server that wants one,
// does not, and backs off.
func TestTLS(t *testing.T) {
	t.Parallel()
	certs := redistest.NewCerts(t)
	other := redistest.NewCerts(t)
	serverCert, err := tls.LoadX509KeyPair(certs.ServerCertFile, certs.ServerKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	tlsServer := &tls.Config{Certificates: []tls.Certificate{serverCert}, MinVersion: tls.VersionTLS12}
	mtlsServer := tlsServer.Clone()
	mtlsServer.ClientAuth, mtlsServer.ClientCAs = tls.RequireAndVerifyClientCert, certs.Pool()
	trusting := &tls.Config{RootCAs: certs.Pool(), MinVersion: tls.VersionTLS12}
	for _, c := range []struct {
		name   string
		server *tls.Config
		client *tls.Config
		ok     bool
	}{
		{"tls", tlsServer, trusting, true},
		{"tls, other CA", tlsServer, other.ClientConfig(), false},
		{"mtls", mtlsServer, certs.ClientConfig(), true},
		{"mtls, no client cert", mtlsServer, trusting, false},
		{"mtls, client cert of another CA", mtlsServer, func() *tls.Config { c := other.ClientConfig(); c.RootCAs = certs.Pool(); return c }(), false},
		{"plaintext to tls", tlsServer, nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			xs := xdstest.Start(t, credentials.NewTLS(c.server))
			xs.Push("n", "v1", rlc("a", "a", perMinute("k", 1)))
			tg := newTarget(t)
			waits := run(t, Options{Address: xs.Addr, NodeID: "n", TLS: c.client, Apply: tg.apply})
			if c.ok {
				tg.waitApplied(t)
				xs.Wait(0, "ACK of v1", xdstest.ACK("v1"))
				return
			}
			nextWait(t, waits)
			if n := len(xs.Requests()); n != 0 {
				t.Errorf("the server received %d requests over a connection that should have failed", n)
			}
			if len(tg.applied) != 0 {
				t.Error("a config was applied over a connection that should have failed")
			}
		})
	}
}

// TestDecode: a resource wrapped in a discovery Resource is unwrapped,
// another type is refused by name, every unit maps, and domains gather
// as files do.
func TestDecode(t *testing.T) {
	t.Parallel()
	inner := mustAny(t, rlc("rl", "d", perMinute("k", 3)))
	wrapped := mustAny(t, &discoveryv3.Resource{Name: "rl", Resource: inner})
	cfg, err := decode([]*anypb.Any{wrapped}, config.Loader{})
	if err != nil || cfg.Domain("d") == nil {
		t.Fatalf("wrapped: %v, %v", cfg, err)
	}
	_, err = decode([]*anypb.Any{mustAny(t, &corev3.Node{Id: "x"})}, config.Loader{})
	if err == nil || !strings.Contains(err.Error(), `xds: resources[0]: a resource of type "type.googleapis.com/envoy.config.core.v3.Node", want `+TypeURL) {
		t.Errorf("other type: %v", err)
	}
	// Two resources of one domain: an error, or merged with MergeDomains.
	two := []*anypb.Any{mustAny(t, rlc("a", "d", perMinute("x", 1))), mustAny(t, rlc("b", "d", perMinute("y", 1)))}
	if _, err := decode(two, config.Loader{}); err == nil || !strings.Contains(err.Error(), `b: domain: domain "d" is already defined in a;`) {
		t.Errorf("one domain twice: %v", err)
	}
	if cfg, err := decode(two, config.Loader{MergeDomains: true}); err != nil || len(cfg.Domain("d").Rules()) != 2 {
		t.Errorf("merged: %v", err)
	}
	// Every unit, and the ones the proto does not know.
	for u, want := range map[rlsconfv3.RateLimitUnit]time.Duration{
		rlsconfv3.RateLimitUnit_SECOND: time.Second, rlsconfv3.RateLimitUnit_MINUTE: time.Minute,
		rlsconfv3.RateLimitUnit_HOUR: time.Hour, rlsconfv3.RateLimitUnit_DAY: 24 * time.Hour,
		rlsconfv3.RateLimitUnit_WEEK: 7 * 24 * time.Hour,
	} {
		d := &rlsconfv3.RateLimitDescriptor{Key: "k", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: u, RequestsPerUnit: 1}}
		cfg, err := decode([]*anypb.Any{mustAny(t, rlc("r", "d", d))}, config.Loader{})
		if err != nil || cfg.Domain("d").Rules()[0].Limit.Period != want {
			t.Errorf("unit %v: %v", u, err)
		}
	}
	d := &rlsconfv3.RateLimitDescriptor{Key: "k", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: 42, RequestsPerUnit: 1}}
	if _, err := decode([]*anypb.Any{mustAny(t, rlc("r", "d", d))}, config.Loader{}); err == nil || !strings.Contains(err.Error(), `r: descriptors[0].rate_limit.unit: unknown unit "42"`) {
		t.Errorf("unit 42: %v", err)
	}
	// Unlimited, with the proto's default unit: no unit given.
	d = &rlsconfv3.RateLimitDescriptor{Key: "k", RateLimit: &rlsconfv3.RateLimitPolicy{Unlimited: true}}
	if cfg, err := decode([]*anypb.Any{mustAny(t, rlc("r", "d", d))}, config.Loader{}); err != nil || !cfg.Domain("d").Rules()[0].Unlimited {
		t.Errorf("unlimited: %v", err)
	}
	// No resources: a config with no domains.
	if cfg, err := decode(nil, config.Loader{}); err != nil || len(cfg.Domains()) != 0 {
		t.Errorf("none: %v, %v", cfg, err)
	}
}

func mustAny(t *testing.T, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestRepeatRefusal: a push refused again (the same resources, or other
// bytes with the same problems, at the same version) is NACKed after a
// growing backoff, without Apply or Rejected; another version is looked
// at afresh.
func TestRepeatRefusal(t *testing.T) {
	t.Parallel()
	applied, rejected := 0, 0
	c := newClient(Options{Address: "x", Backoff: Backoff{Jitter: -1},
		Apply:    func(*config.Config) error { applied++; return nil },
		Rejected: func(error) { rejected++ }})
	bad := &rlsconfv3.RateLimitDescriptor{Key: "k", RateLimit: &rlsconfv3.RateLimitPolicy{RequestsPerUnit: 1}}
	res := mustAny(t, rlc("r", "d", bad))
	// The same resource with an unknown field: other bytes, the same config.
	other := &anypb.Any{TypeUrl: res.TypeUrl, Value: append(append([]byte(nil), res.Value...), 0xf8, 0x3f, 0x01)}
	push := func(version, nonce string, r *anypb.Any) (*discoveryv3.DiscoveryRequest, time.Duration) {
		return c.answer(&discoveryv3.DiscoveryResponse{VersionInfo: version, Nonce: nonce, TypeUrl: TypeURL, Resources: []*anypb.Any{r}})
	}
	for i, step := range []struct {
		version string
		res     *anypb.Any
		delay   time.Duration
	}{
		{"v1", res, 0},
		{"v1", res, time.Second},
		{"v1", other, 1600 * time.Millisecond},
		{"v1", res, 2560 * time.Millisecond},
		{"v2", res, 0},
	} {
		req, d := push(step.version, fmt.Sprint(i), step.res)
		if d != step.delay || req.GetErrorDetail() == nil || req.GetResponseNonce() != fmt.Sprint(i) {
			t.Errorf("push %d (%s): delay %v, NACK %v; want a NACK after %v", i, step.version, d, req, step.delay)
		}
	}
	if applied != 0 || rejected != 2 {
		t.Errorf("Apply %d, Rejected %d times; want 0 and 2 (v1 and v2 once each)", applied, rejected)
	}
	good := mustAny(t, rlc("r", "d", perMinute("k", 1)))
	if req, d := push("v3", "g", good); d != 0 || req.GetErrorDetail() != nil || req.GetVersionInfo() != "v3" {
		t.Errorf("good push: %v after %v, want an ACK of v3 at once", req, d)
	}
	if req, d := push("v1", "again", res); d != 0 || req.GetVersionInfo() != "v3" {
		t.Errorf("v1 after an ACK: %v after %v, want a NACK at once naming v3", req, d)
	}
}
