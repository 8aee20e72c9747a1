package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate/grant"
	"github.com/floodgate-rl/floodgate/server"
	"github.com/floodgate-rl/floodgate/server/rlqs"
	"github.com/floodgate-rl/floodgate/server/transport"
	"github.com/floodgate-rl/floodgate/share"
)

// rlqsFlags are serve's flags of Envoy's rate limit quota service
// (package server/rlqs), served on the gRPC port beside the rate limit
// service.
type rlqsFlags struct {
	on           bool // -rlqs
	off          bool // -rlqs-off, the deprecated negative of -rlqs
	homeURL      string
	ttl, grace   time.Duration
	changeEvery  time.Duration
	idle         time.Duration
	floor        float64
	policy       string
	streamBucket int
	clientStream int
	clientBucket int
}

// resolve applies the deprecated -rlqs-off when -rlqs is not set; set
// holds the names of the flags set on the command line or in the
// environment.
func (f *rlqsFlags) resolve(set map[string]bool) {
	if !set["rlqs"] && set["rlqs-off"] {
		f.on = !f.off
	}
}

func (f *rlqsFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&f.on, "rlqs", true, "serve Envoy's rate limit quota service (envoy.service.rate_limit_quota.v3) on the gRPC port; -rlqs=false turns it off (env FLOODGATE_RLQS)")
	fs.BoolVar(&f.off, "rlqs-off", false, "deprecated: -rlqs=false, still read; -rlqs wins when both are set (env FLOODGATE_RLQS_OFF)")
	fs.StringVar(&f.homeURL, "rlqs-home", "", "`URL` of the Redis (redis:// or rediss://) that leases each Envoy's share of a limit, which every replica must reach; default the -redis URL when it is redis:// or rediss://, the replica's memory without -redis; with a Sentinel or Cluster -redis and no -rlqs-home the quota service is off (env FLOODGATE_RLQS_HOME)")
	fs.DurationVar(&f.ttl, "rlqs-ttl", rlqs.DefaultTTL, "time to live of every quota assignment, whole seconds, above the Envoys' reporting_interval: an Envoy that hears nothing for this long falls back to its expired_assignment_behavior (env FLOODGATE_RLQS_TTL)")
	fs.DurationVar(&f.grace, "rlqs-grace", rlqs.DefaultGrace, "the longest an assignment takes to reach its Envoy plus the largest clock difference between replicas; a share is held TTL+grace after its last assignment (env FLOODGATE_RLQS_GRACE)")
	fs.DurationVar(&f.changeEvery, "rlqs-change-every", 0, "the least time between two changes of one Envoy's token bucket (each hands it a full bucket: the B term of the bound); 0 means half of -rlqs-ttl (env FLOODGATE_RLQS_CHANGE_EVERY)")
	fs.DurationVar(&f.idle, "rlqs-idle", rlqs.DefaultIdle, "abandon a bucket after this long without a request (env FLOODGATE_RLQS_IDLE)")
	fs.Float64Var(&f.floor, "rlqs-floor", rlqs.DefaultFloor, "`fraction` of each limit every Envoy reporting it keeps whatever its demand (env FLOODGATE_RLQS_FLOOR)")
	fs.StringVar(&f.policy, "rlqs-policy", "proportional", "how a limit is split among the Envoys reporting it: proportional (to demand), max_min or equal (env FLOODGATE_RLQS_POLICY)")
	fs.IntVar(&f.clientStream, "rlqs-max-client-streams", rlqs.DefaultMaxClientStreams, "the most quota streams one client (its bearer token, else its IP address or IPv6 /64) may hold open on this replica; beyond, a stream is refused with ResourceExhausted (env FLOODGATE_RLQS_MAX_CLIENT_STREAMS)")
	fs.IntVar(&f.clientBucket, "rlqs-max-client-buckets", rlqs.DefaultMaxClientBuckets, "the most buckets one client's streams may hold on this replica together; beyond, a report is refused with ResourceExhausted (env FLOODGATE_RLQS_MAX_CLIENT_BUCKETS)")
	fs.IntVar(&f.streamBucket, "rlqs-max-stream-buckets", rlqs.DefaultMaxStreamBuckets, "the most buckets one Envoy's stream may report; a report beyond is refused with InvalidArgument (env FLOODGATE_RLQS_MAX_STREAM_BUCKETS)")
}

func (f *rlqsFlags) sharePolicy() (share.Policy, bool) {
	for _, p := range []share.Policy{share.Proportional, share.MaxMin, share.Equal} {
		if p.String() == f.policy {
			return p, true
		}
	}
	return 0, false
}

// problem is the first problem of the flags, naming the flag, or "".
func (f *rlqsFlags) problem() string {
	_, ok := f.sharePolicy()
	switch {
	case f.ttl < time.Second || f.ttl%time.Second != 0:
		return fmt.Sprintf("-rlqs-ttl: %v is not whole seconds of at least 1s (Envoy reads only the seconds)", f.ttl)
	case f.grace < 0:
		return fmt.Sprintf("-rlqs-grace: %v is negative", f.grace)
	case f.changeEvery < 0 || f.changeEvery > f.ttl:
		return fmt.Sprintf("-rlqs-change-every: %v is outside [0, -rlqs-ttl]", f.changeEvery)
	case f.idle <= 0:
		return fmt.Sprintf("-rlqs-idle: %v must be above zero", f.idle)
	case !(f.floor >= 0 && f.floor <= 1):
		return fmt.Sprintf("-rlqs-floor: %v is outside [0, 1]", f.floor)
	case !ok:
		return fmt.Sprintf("-rlqs-policy: %q is not proportional, max_min or equal", f.policy)
	case f.streamBucket < 1:
		return fmt.Sprintf("-rlqs-max-stream-buckets: %d must be at least 1", f.streamBucket)
	case f.clientStream < 1:
		return fmt.Sprintf("-rlqs-max-client-streams: %d must be at least 1", f.clientStream)
	case f.clientBucket < 1:
		return fmt.Sprintf("-rlqs-max-client-buckets: %d must be at least 1", f.clientBucket)
	case f.homeURL != "" && !plainRedisURL(f.homeURL):
		return fmt.Sprintf("-rlqs-home: %q is not a redis:// or rediss:// URL", redactURL(f.homeURL))
	}
	return ""
}

func plainRedisURL(u string) bool {
	return strings.HasPrefix(u, "redis://") || strings.HasPrefix(u, "rediss://")
}

// openRLQS makes the quota service over srv, with its home: -rlqs-home,
// else the -redis URL when it names one Redis, else (no -redis) the
// replica's memory. auth names each stream's client by its token. It returns nil, with a log line, when it is off.
func (c serveConfig) openRLQS(srv *server.Server, auth *transport.Auth, log *slog.Logger) (*rlqs.Service, func(), error) {
	f := &c.rlqs
	if !f.on {
		return nil, func() {}, nil
	}
	url := f.homeURL
	if url == "" && c.redisURL != "" {
		if !plainRedisURL(c.redisURL) {
			log.Warn("Envoy's rate limit quota service is off: its shares need one Redis every replica reaches; give one with -rlqs-home", "store", redactURL(c.redisURL))
			return nil, func() {}, nil
		}
		url = c.redisURL
	}
	if strings.HasPrefix(url, "rediss://") && c.redisTLS.set() {
		log.Warn("the quota service's leases connect to Redis with the system roots and no client certificate: the -redis-tls-* files are not used for them", "home", redactURL(url))
	}
	var home grant.Home
	closeHome := func() {}
	if url != "" {
		h, err := grant.DialHome(url)
		if err != nil {
			return nil, nil, fmt.Errorf("-rlqs-home: %w", err)
		}
		home, closeHome = h, func() { h.Close() }
	}
	policy, _ := f.sharePolicy()
	floor := f.floor
	if floor == 0 {
		floor = -1 // none, where the Options' zero is the default
	}
	svc, err := rlqs.New(srv, &rlqs.Options{Home: home, TTL: f.ttl, Grace: f.grace, ChangeEvery: f.changeEvery,
		Idle: f.idle, Floor: floor, Policy: policy, MaxStreamBuckets: f.streamBucket,
		MaxClientStreams: f.clientStream, MaxClientBuckets: f.clientBucket, Auth: auth})
	if err != nil {
		closeHome()
		return nil, nil, err
	}
	return svc, closeHome, nil
}

// attach serves svc on l's gRPC server and drains it before l stops.
func attachRLQS(l *listeners, svc *rlqs.Service) {
	if svc == nil || l.grpc == nil {
		return
	}
	svc.Register(l.grpc)
	l.drain = func(ctx context.Context) { _ = svc.Drain(ctx) }
}
