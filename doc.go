// Package floodgate is a distributed rate limiter: several instances of an
// application share one budget per key, decided in one atomic step next to
// the state, so that no race lets a request through that the limit should
// stop. The state lives in a Store: store/memstore in process, or
// store/redisstore in Redis (standalone, Sentinel or Cluster), where each
// decision is one Lua script.
//
// A Limiter is what callers use, and Allow is the method most want:
//
//	limiter, _ := floodgate.New(memstore.New(nil), nil)
//	d, err := limiter.Allow(ctx, "user:42", floodgate.Limit{Limit: 60, Period: time.Minute})
//	if !d.Allowed { /* 429, retry after d.RetryAfter */ }
//
// The algorithms (fixed window, sliding window and its log, token bucket,
// GCRA, concurrency) are pure state machines in package algorithm, whose
// doc says exactly what each admits; a Limit names one and its numbers.
// This package imports only the standard library.
//
// # The pipeline
//
// Every decision takes one path, whoever asks: the library's Allow, AllowN,
// AllowEach, Acquire and Decide, and the service (package server), which
// decides the HTTP API's inline limits and descriptors, Envoy's gRPC and
// POST /json through Limiter.Decide. In order:
//
//  1. Validate: the key, cost and limit of every request (Request.Validate);
//     an invalid one is an error wrapping ErrInvalidRequest or
//     ErrInvalidLimit with a *FieldError, and nothing reaches the store.
//  2. Prepare: the KeyPrefix, and the time of Options.Clock (or none, to
//     let the store use its own clock).
//  3. Breaker: requests whose failure policy is FailLocal are decided in
//     the local store at once while the store is known to be failing,
//     except one probe per Options.ProbeInterval.
//  4. Store: the others go to the Store under Options.Timeout, in one round
//     trip when it can (Pipeliner for independent requests, Batcher for all
//     or nothing).
//  5. Failure policy: a store failure (an error wrapping ErrStore, see its
//     doc for the rule) is answered per request, by its own policy
//     (Item.Policy) or the Limiter's: FailOpen allows, FailClosed denies,
//     FailLocal decides in the local store with this instance's Share of
//     the limit. Any other error is denied with the error.
//  6. Observe: the Observer sees every request's Outcome and latency.
//
// A Limiter with no fallback, timeout or observer skips steps 3 and 6 and
// calls the store directly from Allow, which is most of the library's
// speed on the memory store (BENCHMARKS.md).
//
// # Durable quotas
//
// A counter decides atomically but can be lost (a Redis restart without
// persistence, a failover, an eviction). A paid quota (Limit.Durable)
// needs a durable record of what was used beside it: package ledger wraps
// a Store in a decorator that records each commit in a ledger (PostgreSQL
// or SQLite) before it is acknowledged, and rebuilds a counter the store
// lost from it, so that a loss re-admits at most the units held and not
// yet committed. The Limiter takes the wrapped store as any other; over a
// store without it, a durable limit is an invalid limit.
package floodgate
