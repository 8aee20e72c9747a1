// Package goredisstore runs the Redis floodgate.Store of package redisstore
// over a go-redis client (github.com/redis/go-redis/v9), for applications
// that already have one. It is an adapter only: the store, its options,
// its scripts and what it guarantees are redisstore's, and New returns a
// *redisstore.Store. It lives in a package of its own so that a program
// that uses redisstore with its default client, rueidis, never compiles
// go-redis.
//
//	client := redis.NewClient(&redis.Options{Addr: "localhost:6379", MaxRetries: -1, ContextTimeoutEnabled: true})
//	store, err := goredisstore.New(client, nil)
//	if err != nil { … }
//	limiter, err := floodgate.New(store, nil)
//
// New takes a *redis.Client, a *redis.ClusterClient, a failover (Sentinel)
// client, a Ring, or an AutoPipeliner. The client stays the caller's:
// Store.Close does not close it.
//
// # Client options
//
// go-redis retries a command after a network error (Options.MaxRetries,
// default 3), so a script whose reply was lost may run twice and count a
// request twice; set MaxRetries to -1 for exact counts, and
// ContextTimeoutEnabled so that the callers' deadlines reach the socket.
// An AutoPipeliner ignores a call's context once it is queued and resends
// a failed batch whatever MaxRetries says.
//
// Plain go-redis clients send one command per connection at a time, so
// under concurrency, where the rueidis client of redisstore.New and
// redisstore.Open pipelines every caller's scripts into a few connections,
// each decision here waits a round trip on a connection of its own; with a
// single caller there is no pipelining goroutine in the way.
// BenchmarkClient in this package measures both ("Client" in
// docs/redis.md has the figures and the reasons).
//
// # WAIT
//
// redisstore.Options.WaitReplicas needs the script's own connection for
// its WAIT, so the client must be a *redis.Client (or failover client) or
// a *redis.ClusterClient, whose pipelines hold one connection of the
// key's node; New refuses a Ring or an AutoPipeliner with WaitReplicas.
// The client's ReadTimeout must be above WaitTimeout, because go-redis
// sends a pipeline again when its read times out, which would run the
// script twice; New refuses a WaitTimeout that is not below it. On a
// Cluster the script and its WAIT go to the master the client believes
// holds the key, and do not follow a MOVED or ASK redirect, which would
// leave the WAIT behind: a call that meets a failover or a resharding
// fails, the client reloads its slot map, and the next calls go to the
// new master.
package goredisstore
