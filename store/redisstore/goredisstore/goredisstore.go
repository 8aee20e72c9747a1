package goredisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/store/redisstore"
)

// New returns a redisstore.Store over a go-redis client (*redis.Client,
// *redis.ClusterClient, a failover client, a Ring, or an AutoPipeliner):
// for applications that already have one. The client stays the caller's:
// Close does not close it. opts may be nil; Options.TLS is an error, since
// the client has its own TLS configuration. See the package doc for the
// client options that keep counts exact.
func New(client redis.UniversalClient, opts *redisstore.Options) (*redisstore.Store, error) {
	if client == nil {
		return nil, errors.New("goredisstore: New: nil client")
	}
	if opts != nil && opts.TLS != nil {
		return nil, errors.New("goredisstore: New: Options.TLS is for redisstore.Open; configure TLS on the client")
	}
	return redisstore.NewWithConn(conn{client}, opts)
}

// conn is the redisstore.Conn of a go-redis client. A go-redis client that
// is not an AutoPipeliner sends one command per connection round trip.
type conn struct{ c redis.UniversalClient }

var _ redisstore.Conn = conn{}

func (g conn) EvalSHA(ctx context.Context, sha string, keys, args []string, w redisstore.Wait) ([]int64, error) {
	if w.Replicas == 0 {
		return ints(g.c.EvalSha(ctx, sha, keys, anys(args)...))
	}
	return g.waited(ctx, keys[0], w, func(p redis.Pipeliner) *redis.Cmd { return p.EvalSha(ctx, sha, keys, anys(args)...) })
}

func (g conn) Eval(ctx context.Context, src string, keys, args []string, w redisstore.Wait) ([]int64, error) {
	if w.Replicas == 0 {
		return ints(g.c.Eval(ctx, src, keys, anys(args)...))
	}
	return g.waited(ctx, keys[0], w, func(p redis.Pipeliner) *redis.Cmd { return p.Eval(ctx, src, keys, anys(args)...) })
}

func (g conn) FCall(ctx context.Context, fn string, keys, args []string, w redisstore.Wait) ([]int64, error) {
	if w.Replicas == 0 {
		return ints(g.c.FCall(ctx, fn, keys, anys(args)...))
	}
	return g.waited(ctx, keys[0], w, func(p redis.Pipeliner) *redis.Cmd { return p.FCall(ctx, fn, keys, anys(args)...) })
}

// waited runs the script that run queues, then w's WAIT, in one pipeline:
// one connection, so WAIT counts the script's writes. A Cluster client
// would send the keyless WAIT to any node, so the pipeline goes to the
// client of key's master. That client follows no MOVED or ASK redirect,
// so a call that meets a failover or a resharding fails (the script did
// not run), and has the Cluster client reload its slot map, which it
// would otherwise do only every minute, so that the next calls go to the
// new master; as after a lost connection to the node.
func (g conn) waited(ctx context.Context, key string, w redisstore.Wait, run func(redis.Pipeliner) *redis.Cmd) ([]int64, error) {
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
	acked := p.Do(ctx, "WAIT", w.Replicas, w.TimeoutMillis())
	_, _ = p.Exec(ctx) // each command's error is read below
	vals, err := ints(script)
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
	return vals, w.Check(n)
}

// LoadLibrary loads src on each master of a ClusterClient, else on the
// server the client writes to.
func (g conn) LoadLibrary(ctx context.Context, src string) error {
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

func (g conn) Del(ctx context.Context, key string) error {
	return g.c.Del(ctx, key).Err()
}

func (g conn) Ping(ctx context.Context) error { return g.c.Ping(ctx).Err() }

// Cluster is true for a cluster client, and for a client of unknown
// kind (another UniversalClient), for which keeping a script's keys in
// one slot is the safe choice.
func (g conn) Cluster() bool {
	switch g.c.(type) {
	case *redis.Client:
		return false
	}
	return true
}

// CanWait accepts the clients whose pipelines hold one connection of the
// node a key lives on: a *redis.Client (which a failover client is too)
// and a *redis.ClusterClient. A Ring, or an AutoPipeliner that mixes
// callers' commands, cannot say which writes a WAIT would count. The
// client's ReadTimeout must be longer than the WAIT: go-redis retries a
// pipeline whose read timed out, and the script would run again.
func (g conn) CanWait(timeout time.Duration) error {
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

func (conn) IsNoScript(err error) bool {
	return errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT")
}

func (conn) IsNoFunction(err error) bool {
	var e redis.Error
	return errors.As(err, &e) && strings.TrimPrefix(e.Error(), "ERR ") == "Function not found"
}

func anys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// ints decodes a script's reply, an array of integers, checking every
// element.
func ints(cmd *redis.Cmd) ([]int64, error) {
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
