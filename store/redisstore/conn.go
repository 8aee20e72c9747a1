package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Conn is the little a Store needs of a Redis client: run a script by
// digest, by source or as a function, each followed by a WAIT when asked;
// load the function library; delete a key; and recognise a few error
// replies. It is for client adapters, and most applications never see
// one: Open and New wrap a rueidis client in an adapter of this package,
// and package goredisstore wraps a go-redis client. A client library of
// another kind is supported by implementing Conn and calling NewWithConn;
// the store's conformance suite (floodgatetest.Run) should then pass
// through it.
//
// The store calls every method concurrently. A script's reply is an array
// of integers: a method that runs one returns it as []int64, and any other
// shape as an error wrapping floodgate.ErrUnexpectedReply. An error reply
// of Redis is returned as an error whose text is Redis's, with or without
// its "ERR " prefix. A method must not send a script again after a
// network error or a timeout: a script that may have run is an error, not
// a repeat, or a request may be counted twice.
type Conn interface {
	// EvalSHA runs EVALSHA of the script with SHA-1 digest sha on keys and
	// args and returns its reply; then w's WAIT, if w.Replicas is above 0
	// (see Wait).
	EvalSHA(ctx context.Context, sha string, keys, args []string, w Wait) ([]int64, error)
	// Eval runs EVAL of src, which also caches the script on the node,
	// then w's WAIT.
	Eval(ctx context.Context, src string, keys, args []string, w Wait) ([]int64, error)
	// FCall runs FCALL of the function fn, then w's WAIT.
	FCall(ctx context.Context, fn string, keys, args []string, w Wait) ([]int64, error)
	// LoadLibrary runs FUNCTION LOAD REPLACE of src on every master the
	// client knows of (one server, a Sentinel's master, each Cluster
	// master), for Options.Functions. It succeeds if a master took it: a
	// node that failed finds no function on its next call, and the store
	// loads the library again.
	LoadLibrary(ctx context.Context, src string) error
	// Del deletes key, for Store.Reset.
	Del(ctx context.Context, key string) error
	// Ping checks that the server answers, for Store.Ping.
	Ping(ctx context.Context) error
	// Cluster reports whether the client is a Redis Cluster client, whose
	// scripts may only take keys of one slot. A client that cannot tell
	// should report true, the safe choice.
	Cluster() bool
	// CanWait says why the client cannot send a WAIT of up to timeout on
	// the connection of a script run, or returns nil if it can. The store
	// calls it once, when Options.WaitReplicas is above 0, and fails to
	// start with its error.
	CanWait(timeout time.Duration) error
	// IsNoScript reports whether err is Redis's NOSCRIPT error: the
	// EVALSHA did not run, and the store sends the script with Eval.
	IsNoScript(err error) bool
	// IsNoFunction reports whether err is FCALL's "Function not found":
	// the FCALL did not run, and the store loads the library.
	IsNoFunction(err error) bool
}

// Wait is the WAIT that follows a script run on its connection
// (Options.WaitReplicas): at least Replicas replicas must acknowledge the
// run's writes within Timeout. Replicas 0, the zero value, means no WAIT.
//
// WAIT counts the replicas that acknowledged the connection's last write,
// so a Conn must send it on the script's own connection, right after the
// script: pipelined with it (rueidis sends a blocking command, and the
// script with it, on a connection of its own while it waits; a go-redis
// pipeline holds one connection), and on a Cluster to the node of the
// script's keys, without following a MOVED or ASK redirect, which would
// leave the WAIT behind. A Conn sends WAIT Replicas TimeoutMillis() and
// returns Check of its reply.
type Wait struct {
	Replicas int64
	Timeout  time.Duration
}

// ErrNotReplicated is wrapped by the error of a call whose script run fewer
// replicas than Options.WaitReplicas acknowledged in time. The run's
// writes were made on the master: the request may have been counted, and
// a failover now may lose the count.
var ErrNotReplicated = errors.New("redisstore: writes not acknowledged by enough replicas")

// TimeoutMillis is WAIT's timeout argument: Timeout in whole milliseconds,
// rounded down, and at least 1, because WAIT's 0 waits forever.
func (w Wait) TimeoutMillis() int64 {
	return max(1, int64(w.Timeout/time.Millisecond))
}

// Check turns WAIT's reply, the number of replicas that acknowledged, into
// nil, or an error wrapping ErrNotReplicated when it is below Replicas.
func (w Wait) Check(acked int64) error {
	if acked >= w.Replicas {
		return nil
	}
	return fmt.Errorf("%w: %d of %d acknowledged within %v", ErrNotReplicated, acked, w.Replicas, time.Duration(w.TimeoutMillis())*time.Millisecond)
}

// within returns w with its timeout cut to half of what is left of ctx,
// so that a WAIT whose replicas are late answers before its call's
// deadline ends: the call then fails with ErrNotReplicated, and its
// connection stays usable, where a deadline that ends during a WAIT leaves
// rueidis no choice but to close the connection the WAIT blocks. The half
// leaves the other half for the round trip and for Redis, which ends a
// timed-out WAIT at its next event-loop pass (see docs/redis.md).
func (w Wait) within(ctx context.Context) Wait {
	if w.Replicas == 0 {
		return w // no WAIT: every run without one pays nothing here
	}
	if d, ok := ctx.Deadline(); ok {
		w.Timeout = min(w.Timeout, time.Until(d)/2)
	}
	return w
}

// NewWithConn returns a Store that runs its scripts through c, the adapter
// of a Redis client library (see Conn): goredisstore.New calls it for a
// go-redis client, and so may an adapter of another library. Applications
// with a rueidis client call New, and the others Open. The client stays
// the caller's: Close does not close it. opts may be nil; Options.TLS is
// an error, since the client has its own TLS configuration.
func NewWithConn(c Conn, opts *Options) (*Store, error) {
	if c == nil {
		return nil, errors.New("redisstore: NewWithConn: nil Conn")
	}
	if opts != nil && opts.TLS != nil {
		return nil, errors.New("redisstore: NewWithConn: Options.TLS is for Open; configure TLS on the client")
	}
	return newStore(c, opts)
}
