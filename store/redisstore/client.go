package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/floodgate-rl/floodgate"
)

// conn is the little a Store needs from a Redis client: run a script by
// digest or by source, delete a key, and recognise the NOSCRIPT error. One
// implementation per client library keeps the store itself library-neutral.
type conn interface {
	// evalSHA runs EVALSHA and returns its reply, an array of integers;
	// then w's WAIT, if any, on the same connection.
	evalSHA(ctx context.Context, sha string, keys, args []string, w wait) ([]int64, error)
	// eval runs EVAL (which also caches the script on the node), then w's
	// WAIT.
	eval(ctx context.Context, src string, keys, args []string, w wait) ([]int64, error)
	// del deletes a key.
	del(ctx context.Context, key string) error
	// isNoScript reports whether err is Redis's NOSCRIPT error.
	isNoScript(err error) bool
	// fcall runs FCALL and returns its reply, an array of integers, then
	// w's WAIT.
	fcall(ctx context.Context, fn string, keys, args []string, w wait) ([]int64, error)
	// loadLibrary runs FUNCTION LOAD REPLACE of src on every master the
	// client knows of (one server, a Sentinel's master, each Cluster
	// master).
	loadLibrary(ctx context.Context, src string) error
	// isNoFunction reports whether err is FCALL's "Function not found".
	isNoFunction(err error) bool
	// ping checks that the server (every node, for a cluster client that
	// routes PING to one) answers.
	ping(ctx context.Context) error
	// close closes the client.
	close()
	// cluster reports whether the client is a Redis Cluster client, whose
	// scripts may only take keys of one slot.
	cluster() bool
	// canWait says why the client cannot send a WAIT of up to timeout on
	// the connection of a script run, or nil if it can.
	canWait(timeout time.Duration) error
}

// wait is the WAIT that follows a script run on its connection: at least
// replicas replicas must acknowledge the run's writes within timeout.
// replicas 0: no WAIT.
//
// WAIT counts the replicas that acknowledged the connection's last write,
// so it must go on the script's own connection, right after it: pipelined
// with it (rueidis sends a blocking command, and the script with it, on a
// connection of its own while it waits; a go-redis pipeline holds one
// connection), and on a Cluster to the node of the script's keys.
type wait struct {
	replicas int64
	timeout  time.Duration
}

// within returns w with its timeout cut to half of what is left of ctx,
// so that a WAIT whose replicas are late answers before its call's
// deadline ends: the call then fails with ErrNotReplicated, and its
// connection stays usable, where a deadline that ends during a WAIT leaves
// rueidis no choice but to close the connection the WAIT blocks. The half
// leaves the other half for the round trip and for Redis, which ends a
// timed-out WAIT at its next event-loop pass (see the package doc).
func (w wait) within(ctx context.Context) wait {
	if w.replicas == 0 {
		return w // no WAIT: every run without one pays nothing here
	}
	if d, ok := ctx.Deadline(); ok {
		w.timeout = min(w.timeout, time.Until(d)/2)
	}
	return w
}

// ms is the WAIT timeout argument: whole milliseconds, rounded down, and
// at least 1, because WAIT's 0 waits forever.
func (w wait) ms() int64 {
	return max(1, int64(w.timeout/time.Millisecond))
}

// check turns WAIT's reply, the replicas that acknowledged, into nil or
// an error wrapping ErrNotReplicated.
func (w wait) check(acked int64) error {
	if acked >= w.replicas {
		return nil
	}
	return fmt.Errorf("%w: %d of %d acknowledged within %v", ErrNotReplicated, acked, w.replicas, time.Duration(w.ms())*time.Millisecond)
}

// rueidisConn runs scripts on a rueidis client, which pipelines concurrent
// calls. EVALSHA and EVAL are built without ToRetryable: rueidis never
// resends them after a network error, so a script never runs twice.
type rueidisConn struct{ c rueidis.Client }

func (r rueidisConn) evalSHA(ctx context.Context, sha string, keys, args []string, w wait) ([]int64, error) {
	cmd := r.c.B().Evalsha().Sha1(sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
	return r.do(ctx, cmd, keys[0], w)
}

func (r rueidisConn) eval(ctx context.Context, src string, keys, args []string, w wait) ([]int64, error) {
	cmd := r.c.B().Eval().Script(src).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
	return r.do(ctx, cmd, keys[0], w)
}

// do sends cmd, a script run on key, followed by w's WAIT if any. rueidis
// marks WAIT as blocking, so the two go together on a connection of the
// client's blocking pool, and SetSlot sends the WAIT to the node of key.
//
// On a Cluster the two go through a dedicated client instead: its DoMulti
// returns a MOVED or ASK redirect as the script's error (the script did
// not run) and has the client refresh its slot map, where the client's
// DoMulti would follow the redirect with the script alone and leave its
// WAIT on the old node, which counts other writes or, a replica now,
// refuses. So a call that meets a failover or a resharding fails, and is
// answered by its failure policy, and the next calls go to the new node.
func (r rueidisConn) do(ctx context.Context, cmd rueidis.Completed, key string, w wait) ([]int64, error) {
	if w.replicas == 0 {
		return rueidisInts(r.c.Do(ctx, cmd))
	}
	waitCmd := r.c.B().Wait().Numreplicas(w.replicas).Timeout(w.ms()).Build().SetSlot(key)
	var res []rueidis.RedisResult
	if r.cluster() {
		dc, release := r.c.Dedicate()
		res = dc.DoMulti(ctx, cmd, waitCmd)
		release()
	} else {
		res = r.c.DoMulti(ctx, cmd, waitCmd)
	}
	vals, err := rueidisInts(res[0])
	if err != nil {
		return nil, err
	}
	acked, err := res[1].AsInt64()
	if err != nil {
		return nil, fmt.Errorf("WAIT: %w", err)
	}
	return vals, w.check(acked)
}

func (r rueidisConn) del(ctx context.Context, key string) error {
	return r.c.Do(ctx, r.c.B().Del().Key(key).Build()).Error()
}

func (rueidisConn) isNoScript(err error) bool {
	e, ok := rueidis.IsRedisErr(err)
	return ok && e.IsNoScript()
}

func (r rueidisConn) fcall(ctx context.Context, fn string, keys, args []string, w wait) ([]int64, error) {
	cmd := r.c.B().Fcall().Function(fn).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
	return r.do(ctx, cmd, keys[0], w)
}

// loadLibrary loads src on every node of the client, and succeeds if one
// master took it. A replica (a Cluster client knows of them) answers
// READONLY: it gets the library from its master, as it gets every write.
func (r rueidisConn) loadLibrary(ctx context.Context, src string) error {
	loaded := 0
	var errs []error
	for addr, n := range r.c.Nodes() {
		err := n.Do(ctx, n.B().FunctionLoad().Replace().FunctionCode(src).Build()).Error()
		if e, ok := rueidis.IsRedisErr(err); ok && strings.HasPrefix(e.Error(), "READONLY") {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", addr, err))
			continue
		}
		loaded++
	}
	if loaded > 0 {
		// A node that failed (down, unreachable) is left: a call on it
		// finds no function and loads again.
		return nil
	}
	if len(errs) == 0 {
		return errors.New("no master to load the library on")
	}
	return errors.Join(errs...)
}

func (rueidisConn) isNoFunction(err error) bool {
	e, ok := rueidis.IsRedisErr(err)
	return ok && strings.TrimPrefix(e.Error(), "ERR ") == "Function not found"
}

func (r rueidisConn) ping(ctx context.Context) error {
	return r.c.Do(ctx, r.c.B().Ping().Build()).Error()
}

func (r rueidisConn) close() { r.c.Close() }

func (r rueidisConn) cluster() bool { return r.c.Mode() == rueidis.ClientModeCluster }

func (rueidisConn) canWait(time.Duration) error { return nil }

// rueidisInts decodes an array of integers, checking every element.
func rueidisInts(res rueidis.RedisResult) ([]int64, error) {
	if err := res.Error(); err != nil {
		return nil, err
	}
	msgs, err := res.ToArray()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", floodgate.ErrUnexpectedReply, err)
	}
	out := make([]int64, len(msgs))
	for i := range msgs {
		if !msgs[i].IsInt64() {
			return nil, fmt.Errorf("%w: element %d of the reply is not an integer", floodgate.ErrUnexpectedReply, i)
		}
		if out[i], err = msgs[i].AsInt64(); err != nil {
			return nil, fmt.Errorf("%w: element %d: %v", floodgate.ErrUnexpectedReply, i, err)
		}
	}
	return out, nil
}

// goRedisConn runs scripts on a go-redis client. A go-redis client that is
// not an AutoPipeliner sends one command per connection round trip.
type goRedisConn struct{ c redis.UniversalClient }

func (g goRedisConn) evalSHA(ctx context.Context, sha string, keys, args []string, w wait) ([]int64, error) {
	if w.replicas == 0 {
		return goRedisInts(g.c.EvalSha(ctx, sha, keys, anys(args)...))
	}
	return g.waited(ctx, keys[0], w, func(p redis.Pipeliner) *redis.Cmd { return p.EvalSha(ctx, sha, keys, anys(args)...) })
}

func (g goRedisConn) eval(ctx context.Context, src string, keys, args []string, w wait) ([]int64, error) {
	if w.replicas == 0 {
		return goRedisInts(g.c.Eval(ctx, src, keys, anys(args)...))
	}
	return g.waited(ctx, keys[0], w, func(p redis.Pipeliner) *redis.Cmd { return p.Eval(ctx, src, keys, anys(args)...) })
}

// waited runs the script that run queues, then w's WAIT, in one pipeline:
// one connection, so WAIT counts the script's writes. A Cluster client
// would send the keyless WAIT to any node, so the pipeline goes to the
// client of key's master. That client follows no MOVED or ASK redirect,
// so a call that meets a failover or a resharding fails (the script did
// not run), and has the Cluster client reload its slot map, which it
// would otherwise do only every minute, so that the next calls go to the
// new master; as after a lost connection to the node.
func (g goRedisConn) waited(ctx context.Context, key string, w wait, run func(redis.Pipeliner) *redis.Cmd) ([]int64, error) {
	var c redis.Cmdable = g.c
	cc, cluster := g.c.(*redis.ClusterClient)
	if cluster {
		m, err := cc.MasterForKey(ctx, key)
		if err != nil {
			return nil, err
		}
		c = m
	}
	p := c.Pipeline()
	script := run(p)
	acked := p.Do(ctx, "WAIT", w.replicas, w.ms())
	_, _ = p.Exec(ctx) // each command's error is read below
	vals, err := goRedisInts(script)
	if err != nil {
		var reply redis.Error
		if cluster && (!errors.As(err, &reply) || redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK")) && ctx.Err() == nil {
			cc.ReloadState(ctx)
		}
		return nil, err
	}
	n, err := acked.Int64()
	if err != nil {
		return nil, fmt.Errorf("WAIT: %w", err)
	}
	return vals, w.check(n)
}

func (g goRedisConn) del(ctx context.Context, key string) error {
	return g.c.Del(ctx, key).Err()
}

func (goRedisConn) isNoScript(err error) bool {
	return errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT")
}

func (g goRedisConn) fcall(ctx context.Context, fn string, keys, args []string, w wait) ([]int64, error) {
	if w.replicas == 0 {
		return goRedisInts(g.c.FCall(ctx, fn, keys, anys(args)...))
	}
	return g.waited(ctx, keys[0], w, func(p redis.Pipeliner) *redis.Cmd { return p.FCall(ctx, fn, keys, anys(args)...) })
}

// loadLibrary loads src on each master of a ClusterClient, else on the
// server the client writes to.
func (g goRedisConn) loadLibrary(ctx context.Context, src string) error {
	if cc, ok := g.c.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			if err := m.FunctionLoadReplace(ctx, src).Err(); err != nil {
				return fmt.Errorf("%s: %w", m.Options().Addr, err)
			}
			return nil
		})
	}
	return g.c.FunctionLoadReplace(ctx, src).Err()
}

func (goRedisConn) isNoFunction(err error) bool {
	var e redis.Error
	return errors.As(err, &e) && strings.TrimPrefix(e.Error(), "ERR ") == "Function not found"
}

func (g goRedisConn) ping(ctx context.Context) error { return g.c.Ping(ctx).Err() }

func (g goRedisConn) close() { _ = g.c.Close() }

// cluster is true for a cluster client, and for a client of unknown
// kind (another UniversalClient), for which keeping a script's keys in
// one slot is the safe choice.
func (g goRedisConn) cluster() bool {
	switch g.c.(type) {
	case *redis.Client:
		return false
	}
	return true
}

// canWait accepts the clients whose pipelines hold one connection of the
// node a key lives on: a *redis.Client (which a failover client is too)
// and a *redis.ClusterClient. A Ring, or an AutoPipeliner that mixes
// callers' commands, cannot say which writes a WAIT would count. The
// client's ReadTimeout must be longer than the WAIT: go-redis retries a
// pipeline whose read timed out, and the script would run again.
func (g goRedisConn) canWait(timeout time.Duration) error {
	var read time.Duration
	switch c := g.c.(type) {
	case *redis.Client:
		read = c.Options().ReadTimeout
	case *redis.ClusterClient:
		read = c.Options().ReadTimeout
	default:
		return fmt.Errorf("WAIT needs a *redis.Client or *redis.ClusterClient, not a %T", g.c)
	}
	if read > 0 && timeout >= read {
		return fmt.Errorf("WaitTimeout %v is not below the go-redis client's ReadTimeout %v, after which go-redis would send the script again", timeout, read)
	}
	return nil
}

func anys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// goRedisInts decodes an array of integers, checking every element.
func goRedisInts(cmd *redis.Cmd) ([]int64, error) {
	v, err := cmd.Result()
	if err != nil {
		return nil, err
	}
	arr, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%w: a %T, not an array", floodgate.ErrUnexpectedReply, v)
	}
	out := make([]int64, len(arr))
	for i, e := range arr {
		n, ok := e.(int64)
		if !ok {
			return nil, fmt.Errorf("%w: element %d of the reply is a %T, not an integer", floodgate.ErrUnexpectedReply, i, e)
		}
		out[i] = n
	}
	return out, nil
}

// classify wraps the error replies of the scripts in floodgate's sentinels:
// a rejected argument is an invalid request (Apply checks every request
// first, so it means the Go and Lua checks disagree), a key holding
// something else than Floodgate state is an unexpected reply.
func classify(err error) error {
	// rueidis drops the "ERR " of an error reply, go-redis keeps it.
	msg := strings.TrimPrefix(err.Error(), "ERR ")
	switch {
	case strings.HasPrefix(msg, "floodgate: state:"), strings.HasPrefix(msg, "WRONGTYPE"):
		return fmt.Errorf("%w: %w", floodgate.ErrUnexpectedReply, err)
	case strings.HasPrefix(msg, "floodgate: "):
		return fmt.Errorf("%w: %w", floodgate.ErrInvalidRequest, err)
	}
	return err
}
