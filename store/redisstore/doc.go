// Package redisstore is the shared floodgate.Store: the state of every limit
// lives in Redis, and each decision is one Lua script that reads, checks and
// writes it atomically next to the data. Several instances of an
// application that use one Redis share one budget per key: the
// read-check-write race (two instances read 59 of 60, both allow, 61 pass)
// cannot happen, and neither can a counter without an expiry.
//
// Open is the call most applications want:
//
//	store, err := redisstore.Open(ctx, "redis://localhost:6379/0", nil)
//	if err != nil { … }
//	defer store.Close()
//	limiter, err := floodgate.New(store, nil)
//
// Open takes redis://, rediss:// (TLS; Options.TLS for a private CA or
// client certificates), redis-sentinel://, rediss-sentinel://,
// redis-cluster:// and rediss-cluster:// URLs; a mistake in one is an error
// wrapping ErrBadURL that never repeats the password. An application that
// already has a client hands it in: New takes a rueidis.Client, and
// goredisstore.New a go-redis client (package
// store/redisstore/goredisstore, so that a program on rueidis never
// compiles go-redis); NewWithConn takes the adapter of any other client
// library (see Conn). The store is safe for concurrent use; make one per
// client and share it. It needs Redis 6.0 or later, or Valkey;
// Options.Functions needs 7.0.
//
// [docs/redis.md] is the design and reference of this package: every URL
// form, the key schema and the state in each key, coalescing, functions,
// batches across Cluster slots, reservations and their sweep, local
// decisions (the deny cache, local budgets and rate slices, with the proof
// that they never overrun), replication and WAIT, and the reasons for each
// choice.
//
// # Invariants
//
// Each decision is one script on one key, atomic on its Redis node. The
// scripts (scripts/*.lua, embedded) mirror package algorithm line for
// line in integer microseconds, and TestDifferential checks on random
// sequences that they decide exactly as memstore does.
//
// Keys are <prefix>:v1:<algorithm>:<period in µs>:{<encoded subject>}. The
// subject is percent-escaped ('%', '{', '}', '#') and hashed above 128
// bytes, so no key text can change the key's Cluster slot or meet another
// subject; the braces are the hash tag, so every key of one subject is in
// one slot. Store.Key returns the key of a subject and limit. A fixed
// window keeps its state in keys named after it, in its slot: a hash of
// one counter per window (<key>:w, aligned and calendar windows, one
// HINCRBY per decision) or a first-hit window's string (<key>:f); the key
// itself holds only what a version before them wrote, read during a
// rolling upgrade (see "Keys" in docs/redis.md).
//
// A script reads and writes only its one key (a batch or a reservation:
// keys of one slot), so it is Cluster-safe, and it is O(1), or O(limit)
// for the two sorted-set algorithms: never O(keyspace). Every script that
// writes a key sets its TTL in the same step; no key is ever left without
// one. Every argument is checked before a script's first write, since
// Redis does not undo a script that fails halfway.
//
// Scripts run by EVALSHA (or FCALL with Options.Functions); when Redis has
// lost them (a restart, a failover, SCRIPT FLUSH) the store loads them
// again and the caller never sees NOSCRIPT. A call that may have run is
// never repeated.
//
// A script decides at the Redis server's clock (TIME), so application
// servers whose clocks disagree share one window; Request.Now or
// Options.ClientTime decide at the caller's. Every Decision carries the
// time it was decided at.
//
// Concurrent calls share script runs (Options.Coalesce): a run decides
// each request on its own, exactly as its own script would, and a call
// whose context ends while it waits is never sent. The in-process layers
// (Options.DenyCache, Limit.LocalBudget) never admit what Redis would
// refuse.
//
// # Layers
//
// A decision goes down a stack of parts, each of which holds the one below
// it and calls only that one: Store.Apply (validation and the key), the
// deny cache, rate slices and local budgets, the coalescer, the script
// runner (time, encoding, EVALSHA or FCALL, WAIT, decoding), the Conn (the
// client) and the script. A layer that is off is not in the stack.
// ApplyBatch, Reserve and Settle go to the runner directly.
//
// # Guarantees
//
// Each decision is atomic. It is not durable: Redis replicates
// asynchronously, so a failover can lose the counts written since the last
// replication, and a restart without persistence loses them all. A call
// that fails (a timeout, a lost connection) may or may not have been
// counted. Options.WaitReplicas shrinks what a failover loses, at a price
// in availability that docs/redis.md states. docs/guarantees.md measures
// each fault on real Redis.
//
// Errors from Redis are returned wrapped with the algorithm and key; a
// context's deadline and cancellation end a call. A Limiter's
// Options.Timeout (through Store.WithTimeout) bounds each script from its
// send to Redis, not the time a call waited in the process before it
// (timeout.go says why). A key that holds
// something else than a state, or a reply of an unexpected shape, is an
// error wrapping floodgate.ErrUnexpectedReply, never a panic.
//
// [docs/redis.md]: https://github.com/floodgate-rl/floodgate/blob/main/docs/redis.md
package redisstore
