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
// rueidis.Client, and goredisstore.New a go-redis client (package
// store/redisstore/goredisstore, so that a program on rueidis never
// compiles go-redis); NewWithConn takes the adapter of any other client
// library (see Conn). The store is safe for concurrent use; make one per
// client and share it. It needs Redis 6.0 or later (its scripts write with
// SET KEEPTTL), or Valkey; Options.Functions needs 7.0. The tests run on
// Debian's redis-server 7.0.
//
// # Layers
//
// A decision goes down a stack of parts, each of which holds the one below
// it and calls only that one; none calls back up. newStore (store.go)
// wires them, from the bottom up:
//
//	Store.Apply     store.go      validates the request, finds its Redis key (Store.Key)
//	deny cache      denycache.go  Options.DenyCache: denies a key Redis denied, until its RetryAfter
//	rate slices     slice.go      Limit.LocalBudget of a token bucket or GCRA: decides on
//	                              this instance's granted slice of the rate (home.lua, through
//	                              grant.ScriptHome and the Conn); beside the stack below
//	local budgets   budget.go     Limit.LocalBudget: admits from units claimed before; claims
//	                              and gives back units through the runner
//	coalescer       coalesce.go   Options.Coalesce: sends concurrent calls together, in one
//	                              run of multi.lua
//	script runner   runner.go     stamps the time (Options.ClientTime), encodes the request
//	                              (request.go), runs the script by EVALSHA, or FCALL
//	                              (library.go), reloading it when Redis lacks it, then WAIT
//	                              (Options.WaitReplicas), and decodes the reply
//	Conn            conn.go       the client: rueidis.go, or package goredisstore's go-redis
//	scripts/*.lua   scripts.go    the Lua script, run atomically next to the state
//
// A layer that is off (DenyCache 0, Coalesce -1) is not in the stack, and a
// request a layer does not decide passes through it: the in-process layers
// pass on requests with their own Now and of cost 0, the deny cache those
// of a limit with a LocalBudget (the local budgets remember their own
// denials), the local budgets those of a limit without one. ApplyBatch
// goes to the runner directly (batch.lua, and refund.lua for a batch
// over several Cluster slots that one denied), and so do Reserve and
// Settle (reserve.lua, settle.lua). So a request of a fixed window,
// with the default options, goes: Store.Apply, the local budgets (no
// LocalBudget: passed on), the coalescer (a run free: sent alone),
// runner.one, Conn.EvalSHA of the fixed_window script (common.lua,
// state.lua and fixed_window.lua), whose fixed_window_step mirrors
// algorithm.FixedWindow.Step.
//
// # Client
//
// The store runs on github.com/redis/rueidis because it pipelines
// concurrent calls automatically (its README: "All concurrent non-blocking
// redis commands ... are automatically pipelined by default"): the
// goroutines of a busy server write their EVALSHA commands into a couple of
// shared connections and Redis answers them in batches, one system call for
// many decisions. A plain go-redis client keeps a pool of connections (10
// per CPU) and sends one command per connection at a time, so each decision
// waits a round trip on a connection of its own. go-redis v9.22 added an
// AutoPipeliner that pipelines as well, but it is experimental, does not
// honour a per-call context once a command is queued, and resends a whole
// batch after a network error, so a script that already ran counts twice;
// rueidis never resends a script, and an EVALSHA that may have run is an
// error, not a repeat.
//
// BenchmarkClient in package goredisstore measured it (local
// redis-server, a 2-vCPU virtual machine shared with other work;
// BENCHMARKS.md has the figures and the command). With 256 concurrent
// callers running a script that does nothing, rueidis made 100k calls per second on 2 connections, a plain
// go-redis client 33k on 20, go-redis's AutoPipeliner 101k on 1. Through
// the store (gcra, 100k keys), where Redis spends about 45 µs of CPU per
// decision and shares the two CPUs with the callers, the gap narrows to
// 19.7k against 15.1k decisions per second. With a single caller go-redis
// is 20% faster, without a pipelining goroutine in the way. rueidis also
// allocates half as much per call (512 B and 10 allocations, against
// 1024 B and 29).
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
//	    against the system roots for its host name or IP address, unless
//	    Options.TLS says otherwise.
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
// Open's context has a shorter deadline), and conn_timeout, how long a
// connection may wait for an answer before it is closed and dialled again
// (default DefaultConnTimeout, 2s: it bounds how long calls keep failing
// after a network path that silently dropped packets comes back).
//
// Options.TLS replaces the TLS configuration of the rediss forms: a private
// CA in RootCAs, a client certificate for servers that require one
// (tls-auth-clients yes) in Certificates, or in GetClientCertificate to
// read a renewed certificate at each new connection without a restart
// (floodgate serve's -redis-tls-cert and -redis-tls-key do that), and a
// ServerName when the certificate names a host other than the URL's, as
// when the URL holds an IP address and the certificate only a DNS name.
// Left empty, ServerName is each node's own host: the seeds' from the URL,
// and the others' as the Cluster or the sentinels announce them (IP
// addresses, unless the nodes announce host names), so their
// certificates must name those. With TLS 1.3 a server refuses a missing
// or unknown client certificate only after the handshake, so the client
// may see little more than "connection reset by peer"; Open's error says
// when the server asked for a certificate and none was configured. Open
// returns such failures (an unknown authority, a wrong name, a refused
// certificate) at once, rather than retrying until its context ends: the
// client dials when it is made, and a failed first dial is an error; the
// tests check it on standalone, Cluster and Sentinel servers. Options.TLS
// with a URL without TLS is an error.
//
// A deployment that needs more (a Unix socket, a read replica) builds its
// own rueidis.Client and calls New.
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
// # Coalescing
//
// What one Redis decides per second is bounded by the CPU of its single
// command thread, and each script call costs that thread a fixed part
// (reading the command, finding the script, starting Lua, and for EVALSHA
// making the script's helpers again) besides the decision. rueidis
// pipelines concurrent calls into few round trips, but Redis still runs
// one script per call. So the store keeps at most Options.Coalesce script
// runs in flight (default DefaultCoalesce, 2) per group of keys; a call
// that comes while that many are out waits, and when one comes back, every
// call that waited goes out in one script (multi.lua) that decides each
// request on its own, exactly as its own script would, one after the other.
// A run holds at most 128 requests, and 128 waiting calls go out at once,
// whatever is in flight: they already share a run, and holding them would
// cap a store at Coalesce×128 decisions per round trip (853 a second over
// a 300 ms round trip with the default). The script has only the code of
// the run's algorithm when its requests share one, and reads each distinct
// limit and time once (see multi.lua).
//
// Decisions do not change: each is one atomic step on its key (a run of
// several is one atomic step for all of them), and the linearizability and
// conformance suites run with coalescing on. A call that waits is not sent
// until a run is free; if its context ends first, it returns the context's
// error at once and is never sent, so never counted. A call whose context
// ends while its run is out returns at once too, and may have been counted,
// as with a run of its own. A run waits until the latest deadline of its
// calls, so one caller's short deadline does not fail the others; it is
// sent with a context of its own, which carries none of the calls'
// values, so a client hook that reads them (a tracing span) sees the run,
// not the calls. A request
// that fails inside a run (a key holding something else) fails before its
// first write, as in its own script, so it changed nothing; the store runs
// it again alone, so that it reports its own error, and the others of the
// run are decided.
//
// With fewer calls at once than Options.Coalesce, every call goes out at
// once on its own, so a lightly loaded store gains no latency. Under load
// a call may wait for a run to come back, about one round trip, and Redis
// spends far less CPU per decision: BENCHMARKS.md ("Coalescing") has the
// figures. On a Redis Cluster a script's keys must share a slot, so a group
// is one subject (hash tag): calls on a hot subject coalesce, calls on
// different subjects go out as before. Elsewhere (standalone, Sentinel) the
// store is one group. Options.Coalesce -1 turns it off.
//
// # Functions
//
// Redis runs a script's whole body on every EVALSHA: each of the dozen
// helper functions a script defines is made again, as a closure, on every
// call, which is a third of what a fixed window decision costs Redis.
// Options.Functions runs the same code as Redis 7 functions instead: the
// store builds one library from the same Lua files (scripts.go), named
// floodgate_<12 hex digits of its code's SHA-1>, with one function per
// script, and runs each decision with FCALL. The helpers are then made once
// per server, on the library's first call, and each FCALL runs only its
// function. When FCALL answers "Function not found" (the store's first
// call, a restart without persistence, a failover to a server without the
// library, FUNCTION FLUSH), the store loads the library with FUNCTION LOAD
// REPLACE on every master (one server, a Sentinel's master, each Cluster
// master) and calls again, at most three times: the failed call did not
// run. After any other error the call may have run, and it is not repeated.
// Another version of Floodgate has another library, with other function
// names, so versions sharing a Redis do not replace each other's.
//
// The trade-offs: functions need Redis 7.0 or later, or Valkey; on an
// older server every call fails with an error saying so (there is no
// fallback to EVALSHA). The library
// is part of the dataset: it is saved in RDB and AOF and replicated, so it
// survives a restart with persistence and a failover, and it shows in
// FUNCTION LIST; a restart without persistence or FUNCTION FLUSH removes
// it, and the next call loads it again. A managed Redis may refuse
// FUNCTION LOAD (an ACL without the function commands): every call then
// fails with an error naming FUNCTION LOAD and Redis's reason. The default
// is EVALSHA, which needs nothing of the server but scripting.
//
// BenchmarkScriptCost measures both (BENCHMARKS.md, "Functions"): on a
// loaded 2-core machine, FCALL cost Redis 10 to 32% less CPU per decision
// than EVALSHA for fixed_window, sliding_window, token_bucket, gcra and
// concurrency; sliding_window_log, whose sorted-set work dominates, showed
// no clear difference. That is per script call: with coalescing (the
// default), a shared run makes the helpers once for all its requests, and
// the last full benchmark run showed 0.78–1.17× the decisions/s with
// functions, within its noise.
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
// ApplyBatch decides several requests all or nothing, as floodgate.Batcher
// says: "10 per second and 1000 per hour" of one subject, or a tenant's
// limit and a user's (floodgate.Limiter.DecideAll, which the service uses
// for the descriptors of a request). On standalone Redis and Sentinel the
// batch is one run of batch.lua over every key, atomic. On a Redis
// Cluster a script may only touch keys of one slot: the limits of one
// subject share its hash tag, so they are one script, atomic, as before;
// keys of different subjects are grouped by slot, and each slot's
// requests are one run of batch.lua, all of them sent at once.
//
// If every slot admits, the batch is admitted: one round trip. If one
// denies (or fails), each slot that admitted gives back what it took,
// with refund.lua, which mirrors each algorithm's Refund (the table is in
// the algorithm package doc) at the time its decision reported, and its
// requests report the state after it with RetryAfter 0, as a request
// that had room in a denied batch does: a second round trip. A slot that
// denied did so atomically and took nothing (only a limit that counts
// rejections counts its denial, as in any denied batch). So a batch over
// several slots never admits more than each limit allows; what it costs
// is that units of a slot that admitted are taken between its run and its
// refund, about a round trip, and a request decided meanwhile sees them
// taken. TestCrossSlotCompensation measures it on a 3-master Cluster:
// sixteen callers sending 600 batches of a tenant's limit of 150 and
// thirty users' limits of 5 (a quarter also a region's), so that the
// tenant fills only through such units: in five runs, 0.34 to 0.46 slot
// runs per batch were given back, and 8 to 24 batches (1 to 4%) were
// denied by the tenant alone while such units filled it, so that 148 or
// 149 batches were admitted, not 150. Never more.
//
// The refund is not idempotent, so it is never retried: after a refund
// that failed (an error, a timeout, a lost reply) the store cannot know
// whether it ran, and giving back twice would admit more than the limit.
// Its units stay taken until the window or the refill frees them, an
// over-charge, never an under-charge; the batch is still answered denied,
// not failed, since a slot denied it. CrossSlotStats counts the batches
// split, the slots compensated, their units and the refunds that failed.
// A slot that fails (its script did not answer) fails the batch, after
// the slots that admitted have given back.
//
// Concurrency leases are never given back that way: an acquire may renew
// a lease held before, which a release would end. So on a Cluster the
// concurrency requests of a batch must all be in one slot (a batch with
// leases of two subjects is an error wrapping floodgate.ErrInvalidRequest),
// and that slot runs last, only once every other slot admitted, so that a
// lease is taken only when the batch is; if another slot denied, it runs
// as a denied batch, which takes nothing.
//
// # Raising a counter to a ledger's
//
// Store is a floodgate.Raiser: Raise runs raise.lua, which mirrors
// algorithm.FixedWindow.Raise, on the fixed window's key, and sets its TTL
// as a decision does. package ledger repairs a lost counter with it
// (floodgate ledger reconcile -repair), in one atomic step that live
// traffic cannot race.
//
// # Reservations
//
// Store is a floodgate.Reserver, and behaves as memstore's: the
// conformance suite runs the same reservation cases on both (every step
// and its retry, all or nothing across keys, ten clients for the last
// five units, ten retries of one refund, expiry, and random histories
// against the algorithm package), and its histories on standalone Redis
// and a Cluster are linearizable against the model. Each key of a
// reservation gets a hold beside its state, in its slot:
//
//	<state key>:hold:<id>        hash: the hold, until its expiry plus Options.HoldRetention
//	<prefix>:v1:holds:{<shard>}  sorted set: holds made with release, by when they are due
//
// A hold keeps its state (held, denied, committed, cancelled, expired),
// its units, the time they were taken and its expiry, whether it gives
// them back at expiry (release), the answer of the step that settled it,
// and the limit it was reserved under, which a settle uses whatever the
// limit is by then (reserve.lua lists the fields). The scripts:
// reserve.lua mirrors memstore.Store.Reserve (the requests decided as a
// batch, a hold per key, Denied holds recorded so that a retry of a
// denied reserve is denied too, a retry answered with the first answer,
// another request with the ID a conflict); settle.lua mirrors
// memstore.Store.Settle and algorithm.Settle and Expire (every hold
// checked before any changes, TooLate after the expiry); refund.lua
// mirrors each algorithm's Refund, which TestRefundDifferential compares
// with the Go on random histories. Times are integer microseconds of the
// decision's clock, as in every script: the request's Now, the store's
// Clock with ClientTime, or the server's TIME.
//
// A reserve and its commit are two scripts, and three with release; each
// costs Redis about twice a decision by FCALL, and four times by
// EVALSHA, which defines every helper of the holds on each run:
// BENCHMARKS.md has the figures. With reservations, Options.Functions
// halves their cost.
//
// Every key gets its TTL in the script that makes it: a hold when it is
// reserved, until its expiry plus the retention (default
// floodgate.DefaultHoldRetention, an hour), after which a retry finds
// nothing (floodgate.ErrUnknownReservation); the index at least until its
// last entry is due plus the retention. TestReserveKeys and the
// conformance runs check that every key left has one.
//
// Atomicity. On standalone Redis and Sentinel, and on a Cluster when every
// key of a reservation is in one slot (the limits of one subject), a
// reserve or a settle is one script: atomic, as in memstore. On a Cluster,
// a reservation over subjects in several slots (a tenant's limit and a
// user's) is one script per slot, all at once, as a batch (see Batches):
// if a slot denies, each slot that held gives its units back and records
// the denial (settle.lua's deny), so that every key ends with a Denied
// hold and nothing held, as in memstore; if a slot conflicts or fails,
// the holds this call made in the others are given back and deleted
// (undo). The worst case is a batch's: units held between a slot's
// reserve and its compensation, about a round trip, which others see
// taken; a compensation that fails is never retried, and its holds stay
// held (charged at expiry, or given back by the sweep with release),
// while a retry of the reserve, which finds the denied slot's Denied
// holds, completes the denial. A settle is one script per slot, each of
// which checks its own holds before it changes any and records its
// answer, so that a retry completes a settle that failed halfway. A
// conflict that only one slot sees, while another settles, happens only
// when an ID is reused for another request (a commit of another cost
// racing the first, holds forgotten in one slot only): memstore would
// change nothing, here the slots that saw no conflict are settled. A slot's
// holds keep a digest of the reservation's keys, so that a reserve of
// other keys with a known ID conflicts across slots too; a reserve of
// some of the keys of a reservation over several slots then conflicts,
// where memstore replays it.
//
// Expiry and the sweep. A hold without release needs no sweep: its expiry
// changes no budget, and the first settle that comes after it expires it
// and answers floodgate.ErrExpired, as a sweep would have. A hold with
// release must give its units back even if nobody touches it again (a
// caller that crashed). So a reserve with release first adds its holds to
// an index, a sorted set scored by when each is due on the sweep's clock
// (the store's Clock with ClientTime, else the server's TIME; a hold
// keeps the skew between that clock and its decision's), before it
// reserves, so that no hold exists without its entry; an entry whose
// reserve held nothing is dropped when it is due. Store.SweepHolds claims
// the entries due from each index key (at most 100 at a time, made due
// again 10 s later, so that another sweeper skips them), expires their
// holds with settle.lua's expire mode, one script per slot, and removes
// the entries: the work is one script per index key and per slot of the
// holds due, never a scan of the keyspace. Each hold expires once,
// however many stores sweep it: its state says whether it is still held.
// The index is one sorted set, or sixteen on a Cluster ({0} to {15}, each
// hold in shard CRC16(hold key) mod 16), so that indexing spreads over
// the masters. Every store on the same Redis and prefix sweeps every
// hold, whoever made it, every Options.HoldSweep (default one second)
// from its first Reserve until Close. So the units of a reservation with
// release come back at most HoldSweep after its expiry, plus a script run
// (TestSweepCrashedCaller measured 3 to 4 ms, with two stores sweeping
// every 20 ms and a third calling SweepHolds every 10 ms), or up to
// the claim's 10 s later if the sweeper that claimed it stopped halfway;
// with no store left sweeping, they come back when someone settles it,
// or never, as charged units.
//
// # Local decisions
//
// Two options let a store decide some requests in process, with no round
// trip, so that a hot key costs far less than one script run per
// decision, without admitting anything Redis would not. Both are off by
// default. Times are the local clock (Options.Clock with ClientTime, else
// the monotonic clock); what Redis reports as time left is added to the
// local time taken before the call was sent, less 0.1% and 1 ms for clock
// rate differences, so a local entry ends no later than Redis's own time
// would, whatever the offset between the clocks.
//
// Options.DenyCache remembers keys over their limit. When Redis denies a
// request of cost c with RetryAfter r (not Never), the store remembers the
// key under its whole Limit as denied for every cost of at least c (a
// larger cost takes at least as long to fit) until r has passed, and
// denies those requests itself: Allowed false, Remaining 0, Limit and
// ResetAfter as last known, RetryAfter the time left, Now the local clock.
// A request of a smaller cost still goes to Redis. The cache holds at most
// DenyCache keys (32 shards; a full shard drops expired entries among 8 it
// samples, else the one that ends first).
//
// A Limit with a LocalBudget gives each instance a local budget of the
// key: see floodgate.Limit.LocalBudget. A request that its instance's
// local budget cannot cover runs scripts/budget.lua, which decides the
// request exactly as the algorithm's own script does and, if it is
// admitted, claims up to want more units for the instance, counted in
// Redis like admitted ones, at most half of what remains after it, so that
// others still find budget near the limit. want is 0 for a key's first claim, which then runs
// the algorithm's own script, so a key asked for once per window costs
// Redis one script as without a local budget, with nothing to give back
// (bench/run-all.sh shows 1.0 scripts per decision for the local-budget
// variants on 100k keys, though their client-side bookkeeping still costs
// decisions/s); a second request in the same window sets it to 1; it
// doubles each time a budget runs out before its window ends, up to
// Limit.LocalBudget, and halves when an idle budget is given back. The
// instance admits claimed units itself until the window they were counted
// in ends (Allowed true, Limit and ResetAfter as of the last claim,
// Remaining the budget's units plus what Redis reported remaining at the
// last claim: an estimate, at least what this instance can still admit,
// blind to what others spent since; Now the local clock). While one claim
// of a key is in flight, the instance's other callers wait for it rather
// than each claiming. A denied claim is remembered like a DenyCache entry,
// whatever DenyCache says. Unused units are given back to the window's
// count (budget.lua's return) when the budget has gone unused for
// Options.BudgetIdle (a sweeper goroutine, started with the first budget
// and stopped by Close, looks every BudgetIdle/2) and on Close; units of a
// window that ended are dropped, as nothing can spend them. At most 65,536
// local budgets are held at once; requests over that go to Redis without
// one.
//
// Which algorithm allows what, and why:
//
//	algorithm           deny cache                          local budget
//	fixed_window        exact (with count_rejected too)     exact
//	sliding_window      exact; bypassed with count_rejected exact
//	sliding_window_log  exact                               refused by Limit.Validate
//	token_bucket, gcra  exact                               rate slices (below): exact
//	concurrency         bypassed                            refused by Limit.Validate
//
// A denial's RetryAfter is the earliest time the same cost fits if nothing
// else is admitted; other instances' admissions only push it later, so
// for every algorithm where nothing but time frees budget the cached
// denial is exactly what Redis would decide (TestDenyCacheMatchesRedis
// runs one timeline through a cached and a cache-less store). Concurrency
// frees budget on Release, so it is never cached. With CountRejected a
// cached denial is not counted in Redis: on a fixed window that changes
// nothing, because the first counted denial already fills the window
// (count limit+1) until its end, which is its RetryAfter; on a sliding
// window the uncounted denials would lower the next window's estimate, so
// those limits bypass the cache.
//
// A claimed unit was counted in Redis, like an admitted one, when it was
// claimed, and is admitted locally only before the window it was counted
// in ends. On a fixed window (aligned or first-hit) the count of a window
// bounds what it admits, whenever in the window a unit is spent. On a
// sliding window the weighted estimate of the previous window only falls
// as time passes within the current one, so a unit that fit when it was
// claimed still fits when it is spent later in the same window; replayed
// at their spending times, the admitted units are a sequence the algorithm
// admits (TestBudgetZeroOverrun checks exactly that, three instances and
// thirty goroutines through several windows). Giving back takes units off
// the count of the same window only, so the count stays at least what was
// spent. Token bucket, GCRA and the sliding log admit by the time of the
// spend: a full bucket claimed at t and spent at t+L, while another
// instance claims the refill, admits Burst + rate·L at one instant, which
// is why claimed units are not how the buckets take a LocalBudget (see
// "Rate slices"), and why Limit.Validate refuses one for the sliding log.
//
// A refund frees budget before time does: a settle below the hold, a
// cancel, an expiry with release (the sweep) and the compensation of a
// call over several Cluster slots give units back. The store forgets its
// own cached denials of a key it gave units back to; another instance's
// cached denial, and a local budget's remembered denial, may refuse up to
// the units given back until its RetryAfter ends, as after a return.
//
// What survives where: a Reset through this store forgets its cached
// denials and local budgets of the key; a Reset through another instance
// leaves this store's cached denial for at most its RetryAfter, and its
// local budget until the window ends, so up to LocalBudget units may be
// admitted on top of the fresh budget, and giving them back may take as
// many off the fresh count of an aligned window. A fixed window that
// counted a rejection (CountRejected) takes nothing back: it stays denied
// until its end. A return by another instance frees budget before a
// cached denial of the same window ends: that denial may refuse up to the
// returned units, for at most the rest of the window.
//
// The trade-off of local budgets is utilisation, not overrun: an instance
// holding unused units (at most LocalBudget, and at most half of what
// remained when it claimed) can make another deny while that budget sits
// idle, until it spends them, goes idle for BudgetIdle and gives them
// back, or the window ends; and units still held in the last millisecond
// of a window (the margin above) go unspent. A request of a cost above its
// instance's local budget goes to Redis, where the instance's own held
// units count as spent. BenchmarkBudgetHotKey measures it (BENCHMARKS.md
// has the figures): three instances (three clients), thirty goroutines on
// one key, at the server's clock, LocalBudget 20, on a loaded 2-core
// machine. On a fixed window far over its limit (400 per 200 ms) the plain
// store runs one script per decision, the deny cache 0.007, local budgets
// 0.0012 to 0.0017, with 0.95 to 1.00 of the limit admitted per whole
// window (the plain store's 0.88: the machine stalls its callers too) and
// 0.002% of decisions denied while another instance held unused units. On
// a key under its limit, local budgets run 0.094 scripts per decision,
// 10.6 times fewer, on either algorithm. A sliding window at its limit
// frees budget a unit at a time, so local budgets and the cache save
// little there (0.68 to 0.95 scripts per decision): they pay off on hot
// keys under their limit and on fixed windows.
//
// Requests with Request.Now set (their time is not the store's), requests
// of cost 0, and ApplyBatch of two or more requests of a window are decided in Redis,
// where claimed units count as spent. ApplyPipelined decides each request
// through Apply, so with both. Two limits of one key and period that differ
// otherwise (another Limit or LocalBudget) do not share a local budget: the
// first one to claim holds it, and the other is decided in Redis while it
// does.
//
// # Rate slices
//
// A token bucket or GCRA with a LocalBudget is decided by each instance
// on a slice of the limit's rate: a rate r_i (share units per Period)
// and a burst b_i = ⌊r_i × Capacity / Limit⌋, held as a grant from home,
// which is the same protocol and script as the regions' global limits
// (package grant, scripts/home.lua, run here through grant.ScriptHome on
// the store's own Redis, under <prefix>:v1:home:1:{<state key>}).
// Home never lets the live grants of a key add up to more than Limit, so
// Σ r_i ≤ Limit/Period and Σ b_i ≤ Capacity for the grants home counts.
// The instance runs a local bucket of rate r_i and capacity b_i, with the
// memory store's token bucket step (algorithm.TokenBucket, which admits
// exactly what GCRA admits), in process, with no round trip.
//
// Why the instances together never overrun. Three rules keep, at every
// instant, each instance's slice at or below what home counts for it:
// a slice is lowered here before home is told (with the key's lock held,
// so no decision on the old slice is still in flight); it is raised only
// once home's grant has come back; and it stops at the grant's end, while
// home frees it for others only at the end plus SliceGrace (clocks of the
// instances must differ by less); a grant call that comes back after the
// grant's end (it ran late, and home dates a grant from when the call was
// sent) finds a bucket that went on earning at a share home may have
// given to others meanwhile, so it drops its tokens first, as a decision
// after the end does (TestSliceStaleRenewalOverrun). A bucket's tokens
// are kept, at most the new burst, when its slice changes; a slice that
// grows gains rate from
// the grant on and no tokens (the part of a token being earned is
// dropped too). So a local bucket's level, counting the part of a token
// being earned, never exceeds b_i, and it earns at most r_i per unit of
// time. For any interval [s, t], instance i admits at most level_i(s) +
// ∫ r_i, hence all of them together at most
//
//	Σ level_i(s) + ∫_s^t Σ r_i  ≤  Capacity + Limit × (t − s) / Period,
//
// the limit's arrival curve: what one bucket (one GCRA, of emission
// interval T = Period/Limit and tolerance (Capacity − 1)·T) would admit
// at most.
//
// A slice of a key nobody admitted on for a while starts full, so that a
// fresh key admits its burst at once. Each key has a mark in Redis
// (<state key>:seen, scripts/seen.lua): the latest end any instance may
// decide up to. An instance records its end there (its grant's end plus a
// SliceTerm, so that a few renewals need no new record) before it decides
// past the end it recorded last, and stops at whichever of the two ends
// comes first. The record returns the mark that was there; if that mark
// plus SliceGrace plus the refill time D = Capacity × Period / Limit is
// at or before the time the record was sent, nobody admitted in the last
// D before then, so the one bucket would be full, and the slice starts
// with its burst. It still holds: with x that time, the admissions before
// x lie at or before x − D, so for s < x − D they add at most Capacity +
// Limit × (x − D − s)/Period, the levels at x at most Capacity, and the
// two Capacity are paid by the D of silence (Limit × D / Period =
// Capacity). A shorter silence S (from the mark plus SliceGrace to x)
// pays for Limit × S/Period of levels at x: an instance that was the only
// live holder at its grant call, sent after the silence began, starts
// with ⌊share × S/Period⌋ (at most its burst). Every other live holder
// then was granted after that call, so within the silence, and has earned at
// most its own share since; the levels at x add up to at most Limit ×
// S/Period. This is what lets a key asked once a minute be admitted each
// time (TestSliceSparseKey). Otherwise a slice that grows starts empty, as
// above.
//
// TestSliceZeroOverrun checks exactly that, every pair of the
// admissions of four instances with random demand moving between them
// and grant calls that take time on the shared fake clock, and checks the
// invariant above on a snapshot at every grant call; breaking an ordering
// rule (raising before the grant, lowering after telling home) or
// starting a grown slice full whatever the mark says makes it fail;
// TestSliceStartsFull checks when a slice starts full or part full (and
// fails if the refill time is left out of the rule). The conditions of a
// part-full start (alone at the grant call, the silence begun before it,
// the share's rate rather than the limit's) are kept as a margin: a review
// found no test that tells a mutation of any of them apart, and argued
// that with a late renewal's tokens dropped (above) none is needed, since
// no instance then holds tokens from the silence that it can spend after
// it (any holder whose mark is newer records after this one, so starts
// from nothing). They cost only utilisation.
//
// How slices follow demand. The first request of a key at an instance
// asks home at once (the caller waits for that call, and the mark's),
// asking for what is free up to LocalBudget. Then, every
// Options.SliceRenew, the request that finds the renewal due makes the
// grant call (others decide on the
// slice meanwhile): it reports the instance's demand (units asked,
// admitted or not, per Period, averaged with the previous measure) and
// asks for its part of share.Split (Proportional) over every live
// holder's last reported demand, at most LocalBudget. A slice unused for
// 2×SliceRenew (or BudgetIdle, if longer) is given back (a sweeper every
// SliceRenew) and so is every slice at Close. A grant runs SliceTerm past
// its last renewal (home is told a Period of 1 µs, so that it does not
// round the end up to a window boundary): an instance that
// cannot reach Redis decides on its slice until then, then fails its
// requests with the error; an instance that died holds its slice until
// then plus SliceGrace.
//
// The cost is utilisation, never overrun: a shift of demand reaches the
// new instance in about two renewals (the idle one is lowered at its next
// renewal, or given back by its sweeper, and the busy one then grows), and
// the rate the busy one gains starts without tokens, unless the key was
// quiet (the mark above, which costs one more script run per SliceTerm
// per busy key); a key used less often than every 2×SliceRenew costs
// three script runs per use (grant, mark, give-back) where it costs one
// without a LocalBudget, so give one to hot keys; slices are
// whole units per Period, so a limit of a few units per Period splits
// coarsely, and a slice whose burst is below a request's cost cannot
// admit it (RetryAfter is then SliceRenew, not Never, since the slice may
// grow). TestSliceUtilisation measures it: GCRA 1000/s burst 100, three
// instances on a fake clock, demand 2× the limit moving every 3 s (one
// instance, another, all three, a third): 99.2% of the rate admitted
// with SliceRenew 20 ms, 98.8% with 50 ms, 92.7% with 200 ms (the first
// phase, on a fresh key, 103.3% with the burst; the phases right after a
// shift to one idle instance: 96%, 96% and 83%). LocalBudget below Limit
// caps one instance's slice: a single busy instance then admits at most
// LocalBudget per Period.
//
// A decision on a slice: Allowed and Remaining, ResetAfter and RetryAfter
// of the local bucket (Remaining is what this instance can still admit
// now), Limit the limit's Capacity, Now the local clock. A request with
// its own Now is refused (ErrInvalidRequest naming now: the buckets and
// grants run on the store's clock, Options.Clock); so is Reserve with
// such a limit (ErrInvalidRequest naming local_budget: its script holds
// units of the key's state in Redis, which holds none of the rate).
// ApplyBatch of two or more requests, some sliced, is all or nothing: the
// slices decide first and take what they admit, the other requests then
// go to Redis as a batch (or as a denied batch, taking nothing, when a
// slice denied), and if anything denied, each slice gets back what it took
// if nothing but time changed its bucket since (what is still missing, at
// most the cost: as if never taken), and nothing otherwise, since a refill
// the take let in may have been spent (TestSliceBatchGiveBackOverrun), so
// the slices' bound holds; the batch is not one atomic step across
// instances, as a batch across
// Cluster slots is not (TestSliceBatch). Reset does not refill the slices. A
// limit's slices are kept per Redis key (algorithm, period, key): two
// limits of one key that differ in Limit, Burst or LocalBudget take turns
// (each change drops the slice to nothing and asks home again). At most
// 65,536 keys have slices at once; a request over that is denied with
// RetryAfter SliceRenew.
//
// Not covered: home losing its state (a Redis restart without
// persistence, a failover that lost writes) frees every slice while
// instances still decide on theirs, up to the whole limit more until the
// grants end, as for regions (and a lost mark lets a slice start full
// while others spend theirs: up to Capacity more). A grant call that timed out may still run
// at Redis after a later one (a client that resent it on a new
// connection): a late lowering would leave an instance above what home
// counts for it until its next renewal; rueidis keeps one connection's
// commands in order, and regions share the assumption. Clocks further
// apart than SliceGrace void the proof, for the grants as for the mark.
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
// # Replication and WAIT
//
// Options.WaitReplicas shrinks what a failover loses. Each script run is
// followed, on its own connection, by WAIT <replicas> <timeout>, and a
// decision is returned only once that many replicas hold the run's
// writes; otherwise the call fails with an error wrapping
// ErrNotReplicated, and the Limiter answers it by its failure policy. A
// failover that promotes a replica which acknowledged a write keeps that
// count. The case it closes is the common one: after Sentinel or Cluster
// promote a replica, the old master goes on taking writes from the clients
// that have not switched yet, until it is demoted, and all of them are
// lost. Under WAIT none of those calls is answered by a decision, because
// the old master has no replica left to acknowledge them: fail_closed
// denies them, fail_open admits them as failures (counted in its metric),
// and local decides them from its share. internal/faults measures both
// modes under SENTINEL FAILOVER; docs/guarantees.md has the rows.
//
// It is not a consensus protocol, and the number matters. A replica that
// is still attached to the old master after another was promoted
// acknowledges the old master's writes, and the failover drops them when
// it moves that replica to the new master: only WaitReplicas equal to the
// number of replicas closes that gap. The price is availability: with
// every replica waited for, a failover leaves the new master one replica
// short until the old master is demoted and has synced, and every call
// fails meanwhile, as it does whenever a replica is down. Waiting for
// fewer replicas than there are keeps deciding through a replica's outage
// and still keeps every write that the promoted replica acknowledged.
// Measured under SENTINEL FAILOVER (docs/guarantees.md): without WAIT, 100
// requests admitted above a limit of 50; with one replica waited for out
// of one, or two out of two, none, and about 11 s without decisions; with
// one out of two, none in that run, and 1.1 s without decisions. A WAIT
// that timed out does not undo the write on the master, so a failed call
// may have been counted, as any failed call may; a claim of a local
// budget (a limit with a LocalBudget) that fails so has also taken the
// units it claimed,
// which the window then lacks. The cost in the healthy case is a round
// trip from the master to a replica per script run (coalesced runs share
// it) and, with rueidis, a connection of the client's blocking pool for
// each run while it waits.
//
// Timing. A WAIT waits at most WaitTimeout and at most half of what is
// left of its call's deadline, so that it answers before the deadline
// ends; a deadline that ends during a WAIT fails the call with the
// deadline's error and costs the connection, which rueidis closes. Redis
// ends a WAIT that timed out at its next pass through its event loop: at
// once under load, but up to 1000/hz ms late on an idle server (100 ms at
// the default hz 10), so with deadlines of a few milliseconds raise hz
// (hz 100) on servers used this way. A call whose script was missing
// (NOSCRIPT, or no function) waits twice, once after the attempt that
// found it missing.
//
// Clients. WAIT needs the script's own connection (see Wait), so a
// go-redis client must be a *redis.Client (or failover client) or
// *redis.ClusterClient, with a ReadTimeout above WaitTimeout (package
// goredisstore says why). On a Cluster the script and its WAIT go to the
// node the client believes holds the key, and do not follow a MOVED or ASK
// redirect, which would leave the WAIT behind: a call that meets a
// failover or a resharding fails, the client reloads its slot map, and
// the next calls go to the new node.
//
// Errors from Redis are returned wrapped with the algorithm and key; a
// context's deadline and cancellation end a call (a go-redis client needs
// ContextTimeoutEnabled for its deadlines to reach the socket). A key that
// holds something else than a state, or a reply of an unexpected shape, is
// an error wrapping floodgate.ErrUnexpectedReply, never a panic.
package redisstore
