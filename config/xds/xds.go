// Package xds takes rate limit configs from an xDS management server: it
// subscribes to envoyproxy/ratelimit's RateLimitConfig resources
// (TypeURL) over the State-of-the-World aggregated discovery stream, as
// upstream does with CONFIG_TYPE=GRPC_XDS_SOTW, and hands each push to
// the caller as one *config.Config.
//
// Run keeps the subscription until its context ends. Each push holds
// every RateLimitConfig meant for the node, one domain each; it is
// converted as a whole by the rules of a YAML file (config.FromSpec:
// the same checks, the same messages, naming the resource and the field)
// and then given to Options.Apply, which swaps it in. A push that does
// not convert, or that Apply refuses, is NACKed with the problems in the
// request's error_detail and the last accepted config stays; a good one is
// ACKed with its version and nonce. A stream that fails is opened again
// after an exponential backoff with jitter, reset once a stream has
// received a push; a new stream asks for the version last accepted, so a
// server with nothing new sends nothing.
//
// `floodgate serve -config-xds ADDR` runs it in the service
// (docs/xds.md).
package xds

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/floodgate-rl/floodgate/config"
)

// Options configure Run. Address and Apply are required; every other
// field's zero value works.
type Options struct {
	// Address is the xDS server's gRPC target: "host:port", or any target
	// grpc.NewClient accepts ("dns:///xds.example:18000").
	Address string
	// NodeID and Cluster identify this client to the server, in the
	// Node of its requests: a snapshot cache hands out the snapshot set
	// for the node's id (upstream's CONFIG_GRPC_XDS_NODE_ID). NodeMetadata
	// becomes the Node's metadata, each value a string
	// (CONFIG_GRPC_XDS_NODE_METADATA).
	NodeID       string
	Cluster      string
	NodeMetadata map[string]string
	// Headers are sent as gRPC metadata with every stream
	// (CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS): an authorization
	// header, say.
	Headers map[string]string
	// TLS, if set, is the TLS configuration of the connection to the
	// server: its RootCAs verify the server, its ServerName the name the
	// server's certificate must hold, and its Certificates or
	// GetClientCertificate are presented for mutual TLS. Nil connects in
	// plaintext.
	TLS *tls.Config
	// MaxRecvMsgSize is the largest push received, in bytes; 0 is gRPC's
	// default, 4 MiB.
	MaxRecvMsgSize int
	// Loader gathers the domains of a push: with MergeDomains, two
	// resources may define one domain (upstream's MERGE_DOMAIN_CONFIG).
	Loader config.Loader
	// Apply swaps in each push that converts, the whole state of the
	// world in one *config.Config, atomically. It returns nil to accept
	// the push (ACK), or why it cannot serve it (NACK, with the error in
	// the request's error_detail; it must then keep the config it had).
	// Run calls it from one goroutine, one push at a time.
	Apply func(*config.Config) error
	// Rejected, if set, is told of each push that did not convert, which
	// Apply never saw, with the problems sent in the NACK; to count it
	// as a failed reload, say.
	Rejected func(error)
	// Logger receives a line per stream opened and failed and per push
	// accepted or refused; nil discards them.
	Logger *slog.Logger
	// Backoff spaces the attempts to open a stream again.
	Backoff Backoff

	// after waits for the backoff: time.After by default; tests inject
	// their own clock. rand draws the jitter, in [0, 1).
	after func(time.Duration) <-chan time.Time
	rand  func() float64
}

// Backoff is the wait between attempts to open a stream: the nth failure
// in a row (n from 0) waits Initial*Multiplier^n, at most Max, each wait
// moved by up to ±Jitter of itself at random, so that a fleet of clients
// does not reconnect in step. The zero value is gRPC's connection backoff
// (1s, ×1.6, ±20%) with a Max of 30s. After a stream that received a
// push, the count starts again from 0.
type Backoff struct {
	// Initial is the first wait; default 1s.
	Initial time.Duration
	// Max bounds each wait before the jitter; default 30s.
	Max time.Duration
	// Multiplier is the growth of each wait over the one before, at least
	// 1; default 1.6.
	Multiplier float64
	// Jitter is the share of each wait drawn at random, from 0 to 1:
	// 0.2 draws a 10s wait from 8s to 12s. 0 means the default 0.2; a
	// negative Jitter draws nothing.
	Jitter float64
}

// withDefaults is b with every zero field set to its default.
func (b Backoff) withDefaults() Backoff {
	if b.Initial <= 0 {
		b.Initial = time.Second
	}
	if b.Max <= 0 {
		b.Max = 30 * time.Second
	}
	b.Max = max(b.Max, b.Initial)
	if b.Multiplier < 1 {
		b.Multiplier = 1.6
	}
	switch {
	case b.Jitter == 0:
		b.Jitter = 0.2
	case b.Jitter < 0:
		b.Jitter = 0
	case b.Jitter > 1:
		b.Jitter = 1
	}
	return b
}

// wait is the wait after failure n in a row (from 0), r a draw in [0, 1).
func (b Backoff) wait(n int, r float64) time.Duration {
	d := float64(b.Initial)
	for i := 0; i < n && d < float64(b.Max); i++ {
		d *= b.Multiplier
	}
	d = min(d, float64(b.Max))
	d *= 1 + b.Jitter*(2*r-1)
	return time.Duration(d)
}

// Run subscribes to RateLimitConfig resources at o.Address and applies
// each push through o.Apply, until ctx ends; it then returns nil. It
// returns an error at once only when o lacks Address or Apply: a server
// that cannot be reached, or that breaks the stream, is tried again after
// o.Backoff, for as long as ctx lasts.
func Run(ctx context.Context, o Options) error {
	switch {
	case o.Address == "":
		return errors.New("xds: Run: no Address")
	case o.Apply == nil:
		return errors.New("xds: Run: no Apply")
	}
	c := newClient(o)
	failures := 0
	for {
		pushed, err := c.stream(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if pushed {
			failures = 0
		}
		d := c.backoff.wait(failures, c.rand())
		failures++
		c.log.Warn("xds stream failed; opening another after the backoff", "addr", o.Address, "error", err, "retry_in", d, "failures", failures)
		select {
		case <-ctx.Done():
			return nil
		case <-c.after(d):
		}
	}
}

// client is Run's state across streams.
type client struct {
	o       Options
	log     *slog.Logger
	backoff Backoff
	after   func(time.Duration) <-chan time.Time
	rand    func() float64
	node    *corev3.Node
	creds   credentials.TransportCredentials
	// version is the version_info of the last push accepted; "" before.
	version string
	// refused is the last push refused, if no push was accepted since.
	refused *refusal
}

func newClient(o Options) *client {
	c := &client{o: o, log: o.Logger, backoff: o.Backoff.withDefaults(), after: o.after, rand: o.rand}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if c.after == nil {
		c.after = time.After
	}
	if c.rand == nil {
		c.rand = rand.Float64
	}
	c.node = &corev3.Node{Id: o.NodeID, Cluster: o.Cluster, UserAgentName: "floodgate"}
	if len(o.NodeMetadata) > 0 {
		fields := make(map[string]*structpb.Value, len(o.NodeMetadata))
		for k, v := range o.NodeMetadata {
			fields[k] = structpb.NewStringValue(v)
		}
		c.node.Metadata = &structpb.Struct{Fields: fields}
	}
	c.creds = insecure.NewCredentials()
	if o.TLS != nil {
		c.creds = credentials.NewTLS(o.TLS)
	}
	return c
}

// keepaliveTime and keepaliveTimeout find a server gone silent (its host
// down, the path dropping every packet), which would leave the stream
// waiting for a push forever: a ping after 5 minutes without a frame, the
// least a gRPC server accepts by default (more often is answered with
// GOAWAY too_many_pings), and the connection closed when its answer has
// not come in 20 seconds.
const (
	keepaliveTime    = 5 * time.Minute
	keepaliveTimeout = 20 * time.Second
)

// stream opens a connection and a stream, asks for the resources and
// answers each push until the stream fails or ctx ends. pushed reports
// whether a push arrived, which shows the server healthy.
func (c *client) stream(ctx context.Context) (pushed bool, err error) {
	dial := []grpc.DialOption{grpc.WithTransportCredentials(c.creds), grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: keepaliveTime, Timeout: keepaliveTimeout})}
	if c.o.MaxRecvMsgSize > 0 {
		dial = append(dial, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(c.o.MaxRecvMsgSize)))
	}
	// A connection of its own per stream, so that the backoff is this
	// package's alone: a stream on a connection gRPC is itself backing off
	// would fail at once, whatever the wait.
	conn, err := grpc.NewClient(c.o.Address, dial...)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if len(c.o.Headers) > 0 {
		ctx = metadata.NewOutgoingContext(ctx, metadata.New(c.o.Headers))
	}
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return false, err
	}
	// The first request names the node and the version already held.
	if err := st.Send(&discoveryv3.DiscoveryRequest{Node: c.node, TypeUrl: TypeURL, VersionInfo: c.version}); err != nil {
		return false, recvErr(st, err)
	}
	c.log.Info("xds stream open", "addr", c.o.Address, "node", c.node.Id, "version", c.version)
	for {
		resp, err := st.Recv()
		if err != nil {
			return pushed, err
		}
		pushed = true
		req, delay := c.answer(resp)
		if delay > 0 {
			select {
			case <-ctx.Done():
				return pushed, ctx.Err()
			case <-c.after(delay):
			}
		}
		if err := st.Send(req); err != nil {
			return pushed, recvErr(st, err)
		}
	}
}

// recvErr is the stream's own error when Send failed with io.EOF, which
// only says that the stream is over.
func recvErr(st grpc.BidiStreamingClient[discoveryv3.DiscoveryRequest, discoveryv3.DiscoveryResponse], err error) error {
	for range 1 << 10 {
		if _, rerr := st.Recv(); rerr != nil {
			return rerr
		}
	}
	return err
}

// maxDetail bounds the error_detail of a NACK: the first problems of a
// config with a thousand are enough to find them.
const maxDetail = 16 << 10

// answer converts and applies a push and returns its ACK, or its NACK
// and how long to wait before sending it.
//
// A push the same as the one refused last (its version and resources) is
// refused again without another look, log line or Rejected, and its NACK
// waits the backoff, growing while the repeats go on: a server that sends
// a refused push again as soon as it is refused (go-control-plane's
// snapshot cache does, since the NACK names an older version than the
// snapshot's) would otherwise spin with the client. A server answers a
// NACK only once it receives it, so a fixed push arrives at most
// Backoff.Max after it is set.
func (c *client) answer(resp *discoveryv3.DiscoveryResponse) (*discoveryv3.DiscoveryRequest, time.Duration) {
	if r := c.refused; r != nil && r.version == resp.GetVersionInfo() && r.typeURL == resp.GetTypeUrl() && sameResources(r.resources, resp.GetResources()) {
		d := c.backoff.wait(r.repeats, c.rand())
		r.repeats++
		return c.nack(resp, r.err), d
	}
	var err error
	if resp.GetTypeUrl() != TypeURL {
		err = fmt.Errorf("xds: a push of type %q; only %s was asked for", cut(resp.GetTypeUrl(), 200), TypeURL)
	}
	var cfg *config.Config
	if err == nil {
		cfg, err = decode(resp.GetResources(), c.o.Loader)
	}
	if err != nil {
		// The same problems at the same version: a repeat whose bytes
		// differ (a server that marshals a map in any order).
		if r := c.refused; r != nil && r.version == resp.GetVersionInfo() && r.err.Error() == err.Error() {
			r.resources = resp.GetResources()
			d := c.backoff.wait(r.repeats, c.rand())
			r.repeats++
			return c.nack(resp, err), d
		}
		if c.o.Rejected != nil {
			c.o.Rejected(err)
		}
	}
	if err == nil {
		err = c.o.Apply(cfg)
	}
	if err != nil {
		c.log.Error("xds push refused (NACK), keeping the config of the last version accepted", "version", resp.GetVersionInfo(), "accepted", c.version, "error", err)
		c.refused = &refusal{version: resp.GetVersionInfo(), typeURL: resp.GetTypeUrl(), resources: resp.GetResources(), err: err}
		return c.nack(resp, err), 0
	}
	c.refused = nil
	c.version = resp.GetVersionInfo()
	c.log.Info("xds push applied (ACK)", "version", c.version, "resources", len(resp.GetResources()), "domains", len(cfg.Domains()))
	return &discoveryv3.DiscoveryRequest{TypeUrl: TypeURL, VersionInfo: c.version, ResponseNonce: resp.GetNonce()}, 0
}

// nack is the NACK of resp: the version last accepted, resp's nonce, and
// err in error_detail.
func (c *client) nack(resp *discoveryv3.DiscoveryResponse, err error) *discoveryv3.DiscoveryRequest {
	return &discoveryv3.DiscoveryRequest{
		TypeUrl:       TypeURL,
		VersionInfo:   c.version,
		ResponseNonce: resp.GetNonce(),
		ErrorDetail:   &statuspb.Status{Code: int32(codes.InvalidArgument), Message: cut(err.Error(), maxDetail)},
	}
}

// refusal is the push refused last.
type refusal struct {
	version, typeURL string
	resources        []*anypb.Any
	err              error
	// repeats counts the pushes the same as it since.
	repeats int
}

// sameResources reports whether a and b hold the same resources, in any
// order: a snapshot cache keeps them in a map, so each response may list
// them in another order.
func sameResources(a, b []*anypb.Any) bool {
	if len(a) != len(b) {
		return false
	}
	count := make(map[string]int, len(a))
	for _, r := range a {
		count[r.GetTypeUrl()+"\x00"+string(r.GetValue())]++
	}
	for _, r := range b {
		k := r.GetTypeUrl() + "\x00" + string(r.GetValue())
		if count[k] == 0 {
			return false
		}
		count[k]--
	}
	return true
}
