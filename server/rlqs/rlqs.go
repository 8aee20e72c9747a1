package rlqs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/floodgate-rl/floodgate/grant"
	"github.com/floodgate-rl/floodgate/server"
	"github.com/floodgate-rl/floodgate/server/transport"
	"github.com/floodgate-rl/floodgate/share"
)

// Defaults of Options; the package doc says how they enter the bound.
const (
	// DefaultTTL is Options.TTL: an assignment lives 10 s unless renewed,
	// above the reporting_interval of a typical Envoy config (1 to 5 s).
	DefaultTTL = 10 * time.Second
	// DefaultGrace is Options.Grace: the longest an assignment takes to
	// reach an Envoy, plus the largest clock difference between replicas.
	DefaultGrace = 2 * time.Second
	// DefaultFloor is Options.Floor: each Envoy keeps 2% of a limit
	// whatever its demand, so its first request after a quiet spell is
	// admitted without waiting for a rebalance.
	DefaultFloor = 0.02
	// DefaultIdle is Options.Idle: a bucket no request has used for a
	// minute is abandoned.
	DefaultIdle = time.Minute
	// DefaultMaxStreamBuckets is Options.MaxStreamBuckets.
	DefaultMaxStreamBuckets = 1000
	// DefaultMaxBuckets is Options.MaxBuckets.
	DefaultMaxBuckets = 200_000
	// DefaultMaxStreams is Options.MaxStreams.
	DefaultMaxStreams = 4096
	// DefaultMaxClientStreams is Options.MaxClientStreams: one client (a
	// token, or a peer address) may hold 64 of a replica's streams.
	DefaultMaxClientStreams = 64
	// DefaultMaxClientBuckets is Options.MaxClientBuckets: one client may
	// hold a tenth of DefaultMaxBuckets.
	DefaultMaxClientBuckets = 20_000
	// DemandCap bounds the demand a report can claim: at most DemandCap
	// times the limit per period. An Envoy cannot spend more than the
	// limit, and a higher claim only moves the split, so a report of
	// 2^63-1 requests in a nanosecond weighs as much as one of twice the
	// limit (docs/rlqs.md states the share it can take).
	DemandCap = 2
	// HolderHeader is the gRPC metadata key by which an Envoy names
	// itself (its node id, in the rlqs_server's initial_metadata): the
	// streams of one client with one name are one holder at home, so a
	// reconnected Envoy keeps its share. Without it each stream is a
	// holder of its own.
	HolderHeader = "floodgate-holder"
	// MaxBucketIDBytes is the most bytes of keys and values of one
	// bucket ID.
	MaxBucketIDBytes = 4096
)

// Options configure a Service. The zero value of every field is its
// default.
type Options struct {
	// Home grants each Envoy's share of every limit: a grant.RedisHome
	// on the Redis that every replica of the service reaches, so that
	// replicas agree and a restarted one resumes. Nil means a
	// grant.MemHome of the Service's own, right for one replica on the
	// memory store.
	Home grant.Home
	// Prefix starts the key of every grant at home ("rlqs|" by default),
	// kept apart from the keys of regions' global limits.
	Prefix string
	// TTL is the assignment_time_to_live of every assignment: an Envoy
	// that hears nothing more falls back to its expired_assignment_behavior
	// after it. Whole seconds (Envoy reads only the seconds), at least 1 s;
	// default DefaultTTL. Set it above the Envoys' reporting_interval:
	// every report renews it.
	TTL time.Duration
	// Grace is the most an assignment may take to reach its Envoy plus
	// the largest clock difference between replicas; a share is held at
	// home for TTL+Grace after the last assignment that used it. Default
	// DefaultGrace.
	Grace time.Duration
	// ChangeEvery is the least time between two changes of one Envoy's
	// token bucket (each change hands the Envoy a full bucket, which is
	// what the bound counts). Default TTL/2; at most TTL.
	ChangeEvery time.Duration
	// Floor is the fraction of a limit each Envoy keeps whatever its
	// demand (share.Party.Floor); 0 means DefaultFloor, negative none.
	Floor float64
	// Policy splits a limit among the Envoys reporting it; the zero value
	// is share.Proportional.
	Policy share.Policy
	// Idle is how long a bucket may go without a request before it is
	// abandoned; default DefaultIdle.
	Idle time.Duration
	// MaxStreamBuckets bounds the buckets of one stream, MaxBuckets those
	// of all streams, MaxStreams the streams at once; 0 means their
	// defaults. A report beyond them is refused (InvalidArgument, or
	// ResourceExhausted for the service's own bounds).
	MaxStreamBuckets, MaxBuckets, MaxStreams int
	// MaxClientStreams and MaxClientBuckets bound the streams and the
	// buckets of one client, so that one client cannot take all of
	// MaxStreams or MaxBuckets from the others; 0 means
	// DefaultMaxClientStreams and DefaultMaxClientBuckets. A client is
	// the identity of its bearer token (Auth), else its peer address
	// (transport.Peer: the IPv4 address, or the IPv6 /64). Beyond them a
	// stream or a report is refused with ResourceExhausted.
	MaxClientStreams, MaxClientBuckets int
	// Auth names the client of a stream by its bearer token
	// (transport.Auth.Identity); nil, or a stream without a known token,
	// names it by its peer address.
	Auth *transport.Auth
	// Clock is the time of every report and grant; default time.Now.
	Clock func() time.Time
	// Timeout bounds each call to Home; default 1 s.
	Timeout time.Duration
	// Name starts the name of every holder this Service asks home for, so
	// that the grants at home say which replica holds them; default a
	// random incarnation, new at each start.
	Name string
}

// Service implements envoy.service.rate_limit_quota.v3.RateLimitQuotaService
// over a server.Server's config. It is safe for concurrent use. Make one
// with New, register it on a gRPC server with Register, and call Drain
// before stopping that server.
type Service struct {
	rlqsv3.UnimplementedRateLimitQuotaServiceServer
	srv   *server.Server
	o     Options
	home  grant.Home
	log   *slog.Logger
	m     *metrics
	index indexCache

	seq     atomic.Int64
	buckets atomic.Int64 // of every stream

	mu       sync.Mutex
	streams  map[*session]chan struct{} // each stream's drain signal
	clients  map[string]*client         // of the open streams
	holders  map[string]*session        // the open stream of each named holder
	draining bool
}

// client is what one client holds of a replica: its streams (under
// Service.mu) and buckets.
type client struct {
	name    string
	streams int
	buckets atomic.Int64
}

var _ rlqsv3.RateLimitQuotaServiceServer = (*Service)(nil)

// New returns a Service deciding by srv's config, with metrics in
// srv.Registry() and logs to srv.Logger(). A nil opts means the defaults.
func New(srv *server.Server, opts *Options) (*Service, error) {
	if srv == nil {
		return nil, errors.New("rlqs: New: nil server")
	}
	s := &Service{srv: srv, log: srv.Logger(), streams: make(map[*session]chan struct{}),
		clients: make(map[string]*client), holders: make(map[string]*session)}
	if opts != nil {
		s.o = *opts
	}
	o := &s.o
	if o.TTL == 0 {
		o.TTL = DefaultTTL
	}
	if o.Grace == 0 {
		o.Grace = DefaultGrace
	}
	if o.ChangeEvery == 0 {
		o.ChangeEvery = o.TTL / 2
	}
	switch {
	case o.Floor == 0:
		o.Floor = DefaultFloor
	case o.Floor < 0:
		o.Floor = 0
	}
	if o.Idle == 0 {
		o.Idle = DefaultIdle
	}
	if o.MaxStreamBuckets == 0 {
		o.MaxStreamBuckets = DefaultMaxStreamBuckets
	}
	if o.MaxBuckets == 0 {
		o.MaxBuckets = DefaultMaxBuckets
	}
	if o.MaxStreams == 0 {
		o.MaxStreams = DefaultMaxStreams
	}
	if o.MaxClientStreams == 0 {
		o.MaxClientStreams = DefaultMaxClientStreams
	}
	if o.MaxClientBuckets == 0 {
		o.MaxClientBuckets = DefaultMaxClientBuckets
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Timeout == 0 {
		o.Timeout = time.Second
	}
	if o.Prefix == "" {
		o.Prefix = "rlqs|"
	}
	if o.Name == "" {
		o.Name = grant.Incarnation()
	}
	switch {
	case o.TTL < time.Second || o.TTL%time.Second != 0:
		return nil, fmt.Errorf("rlqs: TTL %v: want whole seconds, at least 1s (Envoy reads only the seconds)", o.TTL)
	case o.Grace < 0:
		return nil, fmt.Errorf("rlqs: Grace %v is negative", o.Grace)
	case o.ChangeEvery < 0 || o.ChangeEvery > o.TTL:
		return nil, fmt.Errorf("rlqs: ChangeEvery %v: want at most TTL, %v", o.ChangeEvery, o.TTL)
	case o.Floor > 1:
		return nil, fmt.Errorf("rlqs: Floor %v is above 1", o.Floor)
	case o.Idle < 0 || o.MaxStreamBuckets < 0 || o.MaxBuckets < 0 || o.MaxStreams < 0 || o.Timeout < 0 ||
		o.MaxClientStreams < 0 || o.MaxClientBuckets < 0:
		return nil, errors.New("rlqs: a negative Idle, Timeout or bound")
	case len(o.Name) > 128:
		return nil, fmt.Errorf("rlqs: Name is %d bytes, more than 128", len(o.Name))
	}
	s.home = o.Home
	if s.home == nil {
		s.home = &grant.MemHome{}
	}
	var err error
	if s.m, err = newMetrics(srv.Registry()); err != nil {
		return nil, err
	}
	return s, nil
}

// Register registers s on g, so that g answers StreamRateLimitQuotas.
func (s *Service) Register(g grpc.ServiceRegistrar) {
	rlqsv3.RegisterRateLimitQuotaServiceServer(g, s)
}

// Drain expires the assignments of every open stream (an assignment with
// a time to live of 0, which sends each Envoy to its
// expired_assignment_behavior at once), ends the streams, and refuses new
// ones with Unavailable: call it before stopping the gRPC server, so that
// the Envoys fall back as configured rather than keep an assignment no
// replica renews, and reconnect to another replica. The grants at home
// are not returned: they run out TTL+Grace after their last renewal, the
// time an assignment that did not arrive could still be enforced. It
// returns when every stream has ended or ctx is done.
func (s *Service) Drain(ctx context.Context) error {
	s.mu.Lock()
	s.draining = true
	waits := make([]chan struct{}, 0, len(s.streams))
	for ss, ch := range s.streams {
		if !ss.drainSent {
			ss.drainSent = true
			close(ch)
		}
		waits = append(waits, ss.done)
	}
	s.mu.Unlock()
	for _, w := range waits {
		select {
		case <-w:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// StreamRateLimitQuotas serves one Envoy's stream: every report is
// answered at once with one action per bucket it names, in its order;
// see the package doc. A malformed report ends the stream with
// InvalidArgument naming the field.
func (s *Service) StreamRateLimitQuotas(st grpc.BidiStreamingServer[rlqsv3.RateLimitQuotaUsageReports, rlqsv3.RateLimitQuotaResponse]) error {
	ss, drain, err := s.openStream(st.Context())
	if err != nil {
		return err
	}
	defer s.close(ss)
	type recv struct {
		msg *rlqsv3.RateLimitQuotaUsageReports
		err error
	}
	in := make(chan recv)
	ctx := st.Context()
	// Each report's span continues the trace context the stream opened
	// with: a stream lives as long as its Envoy, too long for a span.
	parent := ctx
	if tr := s.srv.Tracer(); tr != nil {
		parent = tr.Remote(ctx)
	}
	go func() {
		for {
			m, err := st.Recv()
			select {
			case in <- recv{m, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	for {
		select {
		case <-drain:
			if resp := ss.expireAll(); resp != nil {
				_ = st.Send(resp)
			}
			return nil
		case <-ctx.Done():
			return nil
		case r := <-in:
			if r.err != nil {
				// io.EOF: the Envoy closed its side; anything else is the
				// stream's end. Either way nothing is left to answer.
				return nil
			}
			if ss.superseded.Load() {
				return status.Error(codes.Aborted, "rlqs: a newer stream of the same holder took over; this one is closed")
			}
			resp, err := ss.handleTraced(parent, r.msg)
			if err != nil {
				s.m.refused.Inc()
				s.log.Debug("rlqs report refused", "holder", ss.holder, "error", err)
				return err
			}
			// Every report is answered, with no action when home did not
			// answer: a client may wait for the answer of each report.
			if err := st.Send(resp); err != nil {
				return nil
			}
		}
	}
}

// open starts a session of no client and a holder of its own, or
// refuses a stream while draining or beyond MaxStreams.
func (s *Service) open() (*session, chan struct{}, error) {
	return s.openAs("", "")
}

// openStream starts the session of a stream: its client is the identity
// of its bearer token, else its peer address; its holder is named by
// HolderHeader when the stream gives one.
func (s *Service) openStream(ctx context.Context) (*session, chan struct{}, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	first := func(k string) string {
		if v := md.Get(k); len(v) > 0 {
			return v[0]
		}
		return ""
	}
	name := ""
	if id := s.o.Auth.Identity(first("authorization")); id != "" {
		name = "token:" + id
	} else if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		name = "peer:" + transport.Peer(p.Addr.String())
	}
	node := first(HolderHeader)
	if len(node) > 256 {
		return nil, nil, invalidField(HolderHeader, "%d bytes, more than 256", len(node))
	}
	return s.openAs(name, node)
}

// openAs starts a session of client name, named node when node is not
// empty, or refuses it while draining, beyond MaxStreams or beyond the
// client's MaxClientStreams. A named session takes over from an open
// stream of the same holder on this replica, which is refused from its
// next report on.
func (s *Service) openAs(name, node string) (*session, chan struct{}, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining {
		return nil, nil, status.Error(codes.Unavailable, "rlqs: this replica is shutting down; reconnect to another")
	}
	if len(s.streams) >= s.o.MaxStreams {
		return nil, nil, status.Errorf(codes.ResourceExhausted, "rlqs: %d streams open, the most this replica serves", len(s.streams))
	}
	c := s.clients[name]
	if c == nil {
		c = &client{name: name}
	}
	if c.streams >= s.o.MaxClientStreams {
		return nil, nil, status.Errorf(codes.ResourceExhausted, "rlqs: this client (%s) has %d streams open, the most one client may (floodgate serve -rlqs-max-client-streams)", clientKind(name), c.streams)
	}
	c.streams++
	s.clients[name] = c
	ss := s.newSession()
	ss.client = c
	if node != "" {
		sum := sha256.Sum256([]byte(name + "\x00" + node))
		ss.holder = "n." + hex.EncodeToString(sum[:16])
		ss.named = true
		if old := s.holders[ss.holder]; old != nil {
			old.superseded.Store(true)
		}
		s.holders[ss.holder] = ss
	}
	ch := make(chan struct{})
	s.streams[ss] = ch
	s.m.streams.Inc()
	return ss, ch, nil
}

// clientKind is how a refusal names a client without revealing its
// token's digest or a peer's address to another: its kind.
func clientKind(name string) string {
	switch {
	case name == "":
		return "unnamed"
	case name[0] == 't':
		return "by its token"
	}
	return "by its address"
}

// newSession is a session of its own holder name.
func (s *Service) newSession() *session {
	return &session{svc: s, holder: s.o.Name + "." + strconv.FormatInt(s.seq.Add(1), 10),
		buckets: make(map[string]*bucket), done: make(chan struct{})}
}

func (s *Service) close(ss *session) {
	s.mu.Lock()
	delete(s.streams, ss)
	if c := ss.client; c != nil {
		c.buckets.Add(-int64(len(ss.buckets)))
		if c.streams--; c.streams <= 0 && s.clients[c.name] == c {
			delete(s.clients, c.name)
		}
	}
	if ss.named && s.holders[ss.holder] == ss {
		delete(s.holders, ss.holder)
	}
	s.mu.Unlock()
	s.buckets.Add(-int64(len(ss.buckets)))
	s.m.buckets.Sub(float64(len(ss.buckets)))
	s.m.streams.Dec()
	close(ss.done)
}
