package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/floodgate-rl/floodgate"
)

// conn is the little a Store needs from a Redis client: run a script by
// digest or by source, delete a key, and recognise the NOSCRIPT error. One
// implementation per client library keeps the store itself library-neutral.
type conn interface {
	// evalSHA runs EVALSHA and returns its reply, an array of integers.
	evalSHA(ctx context.Context, sha string, keys, args []string) ([]int64, error)
	// eval runs EVAL (which also caches the script on the node).
	eval(ctx context.Context, src string, keys, args []string) ([]int64, error)
	// del deletes a key.
	del(ctx context.Context, key string) error
	// isNoScript reports whether err is Redis's NOSCRIPT error.
	isNoScript(err error) bool
	// fcall runs FCALL and returns its reply, an array of integers.
	fcall(ctx context.Context, fn string, keys, args []string) ([]int64, error)
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
}

// rueidisConn runs scripts on a rueidis client, which pipelines concurrent
// calls. EVALSHA and EVAL are built without ToRetryable: rueidis never
// resends them after a network error, so a script never runs twice.
type rueidisConn struct{ c rueidis.Client }

func (r rueidisConn) evalSHA(ctx context.Context, sha string, keys, args []string) ([]int64, error) {
	cmd := r.c.B().Evalsha().Sha1(sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
	return rueidisInts(r.c.Do(ctx, cmd))
}

func (r rueidisConn) eval(ctx context.Context, src string, keys, args []string) ([]int64, error) {
	cmd := r.c.B().Eval().Script(src).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
	return rueidisInts(r.c.Do(ctx, cmd))
}

func (r rueidisConn) del(ctx context.Context, key string) error {
	return r.c.Do(ctx, r.c.B().Del().Key(key).Build()).Error()
}

func (rueidisConn) isNoScript(err error) bool {
	e, ok := rueidis.IsRedisErr(err)
	return ok && e.IsNoScript()
}

func (r rueidisConn) fcall(ctx context.Context, fn string, keys, args []string) ([]int64, error) {
	cmd := r.c.B().Fcall().Function(fn).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
	return rueidisInts(r.c.Do(ctx, cmd))
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

func (g goRedisConn) evalSHA(ctx context.Context, sha string, keys, args []string) ([]int64, error) {
	return goRedisInts(g.c.EvalSha(ctx, sha, keys, anys(args)...))
}

func (g goRedisConn) eval(ctx context.Context, src string, keys, args []string) ([]int64, error) {
	return goRedisInts(g.c.Eval(ctx, src, keys, anys(args)...))
}

func (g goRedisConn) del(ctx context.Context, key string) error {
	return g.c.Del(ctx, key).Err()
}

func (goRedisConn) isNoScript(err error) bool {
	return errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT")
}

func (g goRedisConn) fcall(ctx context.Context, fn string, keys, args []string) ([]int64, error) {
	return goRedisInts(g.c.FCall(ctx, fn, keys, anys(args)...))
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
