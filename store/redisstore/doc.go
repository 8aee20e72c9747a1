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
// An application that already has a client hands it in: New takes a
// rueidis.Client, NewGoRedis a go-redis client. The store is safe for
// concurrent use; make one per client and share it.
//
// # Client
//
// The store runs on github.com/redis/rueidis because it pipelines
// concurrent calls automatically: the goroutines of a busy server write
// their EVALSHA commands into a few shared connections and Redis answers
// them in batches, one system call for many decisions. go-redis's clients
// keep a pool of connections and send one command per connection at a time,
// so each decision waits a full round trip on a connection of its own;
// go-redis v9.22 added an AutoPipeliner, but it is experimental, does not
// honour a per-call context once a command is queued, and resends a whole
// batch after a network error (a script that already ran would count
// twice). rueidis never resends a script: an EVALSHA that may have run is
// reported as an error, never repeated.
//
// BenchmarkClient measures it on one workload (gcra, 100k keys, a local
// redis-server, 2 vCPUs, with other work on the machine): with 64
// concurrent callers rueidis decided about 2.3 times as many requests per
// second as a plain go-redis client, and about as many as go-redis's
// AutoPipeliner; with one caller the three are alike. BENCHMARKS.md has the
// figures and the command.
//
// # URLs
//
// Open understands these forms. Every part in brackets is optional; a
// password or user name with reserved characters is percent-encoded
// ("p%40ss" for "p@ss"). Query parameters other than those listed are an
// error wrapping ErrBadURL, as is every other mistake; no error repeats the
// password.
//
//	redis://[user:password@]host[:port][/db]
//	    One server; the port defaults to 6379, the database to 0.
//	    redis://localhost
//	    redis://:s3cret@10.0.0.5:6380/2
//	    redis://app:s3cret@cache.internal:6379?db=2&dial_timeout=2s
//	rediss://…
//	    The same over TLS (1.2 or later), verifying the server's certificate
//	    against the system roots for its host name.
//	    rediss://default:s3cret@my-cache.example.com:6380
//	redis-sentinel://[user:password@]host[:port][,host[:port]…]/mastername
//	redis-sentinel://…?master=mastername
//	    The master that the sentinels name, followed across failovers; the
//	    port of a sentinel defaults to 26379. user:password authenticate to
//	    the master and replicas; sentinel_username and sentinel_password to
//	    the sentinels; db selects the database.
//	    redis-sentinel://s1:26379,s2:26379,s3:26379/mymaster
//	    redis-sentinel://app:s3cret@s1,s2,s3?master=mymaster&db=1&sentinel_password=sp
//	rediss-sentinel://…
//	    The same over TLS, to the sentinels and to the master.
//	redis-cluster://[user:password@]host[:port][,host[:port]…]
//	    A Redis Cluster: any node or nodes as seeds; the client learns the
//	    others and follows MOVED and ASK redirects. A cluster has only
//	    database 0.
//	    redis-cluster://10.0.0.1:7000,10.0.0.2:7000
//	rediss-cluster://…
//	    The same over TLS; each node is verified by its own name.
//
// Every form takes dial_timeout, a Go duration (default 5s, or less when
// Open's context has a shorter deadline). A deployment that needs more (a
// private CA, client certificates, a Unix socket, a read replica) builds
// its own rueidis.Client and calls New.
//
// # Keys
//
// A store keeps one state per key (Request.Key, the subject), algorithm and
// period, as floodgate.Store says, each in one Redis key:
//
//	<prefix>:v1:<algorithm>:<period in µs>:{<encoded subject>}
//	floodgate:v1:gcra:1000000:{user:42}
//
// The prefix is Options.Prefix (default "floodgate"); v1 is the version of
// the state layout, so that a later layout never misreads an older one. The
// subject is encoded so that no text can change the key's Cluster slot or
// collide with another subject: '%', '{', '}' and '#' are percent-escaped
// ("{evil}" becomes "%7Bevil%7D"), and a subject longer than 128 bytes
// becomes '#' followed by the unpadded base64url SHA-256 of the subject (an
// escaped subject never holds '#', so the two never meet). The prefix may
// not hold a brace, so the braces around the encoded subject are always the
// key's hash tag: every key of one subject is in one Cluster slot, which is
// what lets a batch touch them in one script. Store.Key returns the key of
// a subject and limit.
//
// The state in each key, and the Go function its script mirrors:
//
//	fixed_window        string "<start>:<count>"                algorithm.FixedWindow
//	sliding_window      string "<start>:<prev>:<curr>"          algorithm.SlidingWindow
//	token_bucket        string "<taken>:<last>:<last_frac>"     algorithm.TokenBucket
//	gcra                string "<tat>:<tat_frac>"               algorithm.GCRA
//	sliding_window_log  sorted set: member "<call id>:<i>",
//	                    scored by the µs it was admitted at     algorithm.SlidingWindowLog
//	concurrency         sorted set: member "<lease ID>.<i>",
//	                    scored by the µs it expires at          algorithm.Concurrency
//
// Times are integer microseconds and every value an integer: the scripts
// (scripts/*.lua, one per algorithm, embedded in the binary) mirror the
// algorithm package line for line with the same integer arithmetic, and
// TestDifferential checks on random sequences that they decide exactly as
// memstore does. A script reads and writes only its one key, so it is
// Cluster-safe, and it is O(1), or O(limit) for the two sorted sets (trimmed
// in the same script): never O(keyspace).
//
// Every script that writes a key sets its TTL in the same step: the time
// until the state is back to empty (the algorithm's Expires, the
// decision's ResetAfter), rounded up to a millisecond, and at least one
// second, because Redis 7.0 can expire a key while a script is still using
// it. Keeping a state past its expiry changes no decision: the algorithms
// read a state older than its period as empty. A script that leaves a
// state empty deletes its key, and one that changes nothing writes
// nothing. No key is ever left without a TTL; the tests scan Redis for one
// after every run.
//
// Scripts run by EVALSHA. When Redis does not have a script (after a
// restart, a failover or SCRIPT FLUSH) it answers NOSCRIPT and the store
// sends the script itself with EVAL, which caches it again: the caller never
// sees NOSCRIPT. Every argument is checked in the script before its first
// write, since Redis does not undo a script that fails halfway.
//
// # Time
//
// By default a script decides at the Redis server's clock (TIME), so
// application servers whose clocks disagree still share one window. Redis 7
// replicates a script's writes, not the script, so this is allowed. A
// request with Request.Now set is decided at that time instead, and
// Options.ClientTime (or Options.Clock) stamps every request with the
// process's clock: for managed Redis offerings that forbid TIME in scripts,
// and for tests. Every Decision carries the time it was decided at, in
// Decision.Now.
//
// # Batches
//
// ApplyBatch decides several requests of one subject ("10 per second and
// 1000 per hour") in one script, all or nothing, as floodgate.Batcher says:
// their keys share the subject's hash tag, so the batch works on Redis
// Cluster too. Requests of different keys in one batch are an error
// wrapping floodgate.ErrInvalidRequest; decide them apart.
//
// # Guarantees
//
// Each decision is atomic: a script runs alone on its Redis node, so no two
// decisions interleave, however many processes share the store. It is not
// durable: Redis replicates asynchronously, so a failover (Sentinel or
// Cluster) can lose the counts written since the last replication, and a
// restart without persistence loses all of them; limits then start from
// empty. A call that fails (a timeout, a lost connection) may or may not
// have been counted. With ClientTime, decisions are as right as the
// callers' clocks agree.
//
// Errors from Redis are returned wrapped with the algorithm and key; a
// context's deadline and cancellation end a call (a go-redis client needs
// ContextTimeoutEnabled for its deadlines to reach the socket). A key that
// holds something else than a state, or a reply of an unexpected shape, is
// an error wrapping floodgate.ErrUnexpectedReply, never a panic.
package redisstore
