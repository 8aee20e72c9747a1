package redisstore

import (
	"cmp"
	"crypto/tls"
	"fmt"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algorithm"
)

// Options configure a Store. A nil *Options, or the zero value, means every
// default.
type Options struct {
	// Prefix starts every key; default DefaultPrefix ("floodgate"). It must
	// not contain '{' or '}', which would change the keys' Cluster slot.
	// Give each application its own prefix when several share a Redis.
	Prefix string
	// ClientTime decides requests whose Now is zero at this process's clock
	// (Clock), passed to the script, instead of the Redis server's TIME.
	// Use it on managed Redis offerings that forbid TIME in scripts. Every
	// process sharing the limits should then have a synchronised clock.
	// Default false: the server's clock, which every instance shares.
	ClientTime bool
	// Clock is the clock of ClientTime; nil means the system clock. Setting
	// it implies ClientTime.
	Clock floodgate.Clock
	// DenyCache is the most keys the store remembers as over their limit,
	// so that a client hammering a denied key costs no round trip until
	// its RetryAfter: see "Local decisions" in docs/redis.md for when
	// this is exact. Default 0: off.
	DenyCache int
	// BudgetIdle is how long the local budget of a key (a limit with a
	// LocalBudget) may go unused before the store gives its unused units
	// back to Redis; 0 means DefaultBudgetIdle.
	BudgetIdle time.Duration
	// SliceRenew is how often an instance renews the slice of a key's rate
	// it decides a TokenBucket or GCRA with a LocalBudget on (see "Rate
	// slices" in docs/redis.md), reporting its demand and moving its
	// share toward its part of the split: a shift of demand between
	// instances is followed in about two of them. A slice unused for
	// twice as long (or BudgetIdle, if longer) is given back. 0 means
	// DefaultSliceRenew.
	SliceRenew time.Duration
	// SliceTerm is how long a slice's lease runs after its last renewal:
	// an instance that
	// cannot reach Redis decides on its slice until then, and the slice
	// of an instance that died stays unused until then plus SliceGrace.
	// 0 means DefaultSliceTerm; at least SliceRenew.
	SliceTerm time.Duration
	// SliceGrace is how long after a lease's end its slice stays counted:
	// above the largest difference between the clocks of the instances
	// sharing a Redis. 0 means DefaultSliceGrace.
	SliceGrace time.Duration
	// Functions runs the scripts as Redis functions (FCALL) instead of
	// EVALSHA: the store loads its library with FUNCTION LOAD REPLACE on
	// every master when a call finds its function missing (the first
	// call, after a restart without persistence, after FUNCTION FLUSH),
	// then calls again (at most three loads per call): a call that failed
	// with "Function not found" did not run. A function runs only its own code per call, where
	// EVALSHA runs the whole script, defining every helper again: it
	// costs Redis less CPU per decision (see "Functions" in
	// docs/redis.md).
	//
	// Trade-offs: it needs Redis 7.0 or later (or Valkey); on an older
	// server every call fails with an error saying so, which wraps Redis's
	// unknown command error. There is no fallback to EVALSHA. Functions
	// are part of the dataset: persisted in RDB and AOF and replicated, so
	// they survive a failover, but also visible to FUNCTION LIST and
	// removed by FUNCTION FLUSH (after which the store loads them again).
	// A managed Redis may refuse FUNCTION LOAD (an ACL that denies it):
	// every call that finds no library then fails with an error naming
	// FUNCTION LOAD and Redis's reason. Default false: EVALSHA.
	Functions bool
	// Coalesce is how many script runs the store keeps in flight per
	// group of keys (the whole store, or one subject on a Redis Cluster)
	// before a concurrent call waits for one to come back; the calls that
	// waited then go together in one script run that decides each on its
	// own (128 waiting calls, a full run, go out at once). Under load this costs Redis far less CPU per decision, so one
	// Redis decides more per second; with fewer calls at once every call
	// goes out on its own at once. Decisions are the same either way: see
	// "Coalescing" in docs/redis.md. 0 means DefaultCoalesce; a negative
	// value turns coalescing off, so that every call runs its own script.
	Coalesce int
	// WaitReplicas, above 0, follows every script run with Redis's WAIT on
	// the same connection: a decision is returned only once that many
	// replicas have acknowledged the run's writes. A run they do not
	// acknowledge within WaitTimeout returns an error wrapping
	// ErrNotReplicated, which the Limiter answers by its failure policy;
	// the run did count on the master. This shrinks what a failover loses
	// (see "Replication and WAIT" in docs/redis.md) at the price of a
	// round trip to a replica per run and a dedicated connection while it
	// waits. Default 0: no WAIT, the Redis default of asynchronous
	// replication.
	WaitReplicas int
	// WaitTimeout is how long a WAIT waits for the replicas, at most, and
	// never more than half of what is left of the call's deadline; 0 means
	// DefaultWaitTimeout. It is rounded down to a whole millisecond,
	// WAIT's unit, and is at least 1 ms. With a go-redis client it must be
	// below the client's ReadTimeout (see package goredisstore).
	WaitTimeout time.Duration
	// HoldRetention is how long a reservation's holds are kept after they
	// expire, so that a retried reserve, commit or cancel gets the first
	// answer (floodgate.Reserver); 0 means floodgate.DefaultHoldRetention.
	// Each hold is a Redis key that lives until its expiry plus this, and
	// for a reservation with ReleaseOnExpiry at least the sweep's lease
	// (10 s) plus HoldSweep (at least a second) more, so that a late
	// sweep still finds it.
	HoldRetention time.Duration
	// HoldSweep is how often the store looks for reservations made with
	// ReleaseOnExpiry that expired unsettled, to give their units back
	// (SweepHolds): the longest such units stay taken past their expiry.
	// The sweeper starts with the store's first Reserve and stops at
	// Close. 0 means DefaultHoldSweep; a negative value turns the
	// sweeper off (call SweepHolds yourself, or let another instance
	// sweep: any store on the same Redis and prefix sweeps every hold).
	HoldSweep time.Duration
	// TLS is the TLS configuration of Open's connections for a rediss://,
	// rediss-sentinel:// or rediss-cluster:// URL, in place of the default
	// (TLS 1.2 or later, the server verified against the system roots):
	// for a private CA (RootCAs), a client certificate for mutual TLS
	// (Certificates, or GetClientCertificate to read a renewed one at
	// each new connection), or a server name other than the URL's host
	// (ServerName). Open uses a clone, with MinVersion TLS 1.2 if it is 0.
	// Leave ServerName empty for a Cluster, so that each node is verified
	// by the name or IP address it is reached at; set, every node's
	// certificate must hold that one name. With rediss-sentinel:// the
	// sentinels are reached with it too. Default nil: the default above.
	// Setting it with a URL without TLS (redis://…) is an error, not
	// ignored, and so is handing it to New or NewWithConn (goredisstore.New),
	// whose client has its own TLS configuration.
	TLS *tls.Config
}

// DefaultWaitTimeout is the default Options.WaitTimeout.
const DefaultWaitTimeout = 50 * time.Millisecond

// DefaultBudgetIdle is the default Options.BudgetIdle.
const DefaultBudgetIdle = 100 * time.Millisecond

// DefaultHoldSweep is the default Options.HoldSweep.
const DefaultHoldSweep = time.Second

// validOptions checks what a Store cannot work with; a nil opts is valid.
func validOptions(opts *Options) error {
	if opts != nil && strings.ContainsAny(opts.Prefix, "{}") {
		return fmt.Errorf("redisstore: Options.Prefix %q contains a brace, which would change the keys' Cluster slot", opts.Prefix)
	}
	if opts != nil && opts.DenyCache < 0 {
		return fmt.Errorf("redisstore: Options.DenyCache %d is negative", opts.DenyCache)
	}
	if opts != nil && opts.BudgetIdle < 0 {
		return fmt.Errorf("redisstore: Options.BudgetIdle %v is negative", opts.BudgetIdle)
	}
	if opts != nil && (opts.SliceRenew < 0 || opts.SliceTerm < 0 || opts.SliceGrace < 0) {
		return fmt.Errorf("redisstore: Options.SliceRenew %v, SliceTerm %v and SliceGrace %v: none may be negative", opts.SliceRenew, opts.SliceTerm, opts.SliceGrace)
	}
	if opts != nil && opts.SliceTerm != 0 && opts.SliceTerm < cmp.Or(opts.SliceRenew, DefaultSliceRenew) {
		return fmt.Errorf("redisstore: Options.SliceTerm %v is below SliceRenew %v: a lease would end before its renewal", opts.SliceTerm, cmp.Or(opts.SliceRenew, DefaultSliceRenew))
	}
	if opts != nil && opts.WaitReplicas < 0 {
		return fmt.Errorf("redisstore: Options.WaitReplicas %d is negative", opts.WaitReplicas)
	}
	if opts != nil && opts.HoldRetention < 0 {
		return fmt.Errorf("redisstore: Options.HoldRetention %v is negative", opts.HoldRetention)
	}
	if opts != nil && opts.HoldRetention > time.Duration(algorithm.MaxPeriod)*time.Microsecond {
		return fmt.Errorf("redisstore: Options.HoldRetention %v is above %v", opts.HoldRetention, time.Duration(algorithm.MaxPeriod)*time.Microsecond)
	}
	if opts != nil && opts.WaitTimeout < 0 {
		return fmt.Errorf("redisstore: Options.WaitTimeout %v is negative", opts.WaitTimeout)
	}
	return nil
}
