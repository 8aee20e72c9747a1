package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-rl/floodgate"
)

// rueidisConn is the Conn of a rueidis client, which pipelines concurrent
// calls. EVALSHA and EVAL are built without ToRetryable: rueidis never
// resends them after a network error, so a script never runs twice.
type rueidisConn struct{ c rueidis.Client }

var _ Conn = rueidisConn{}

func (r rueidisConn) EvalSHA(ctx context.Context, sha string, keys, args []string, w Wait) ([]int64, error) {
	cmd := r.c.B().Evalsha().Sha1(sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
	return r.do(ctx, cmd, keys[0], w)
}

func (r rueidisConn) Eval(ctx context.Context, src string, keys, args []string, w Wait) ([]int64, error) {
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
func (r rueidisConn) do(ctx context.Context, cmd rueidis.Completed, key string, w Wait) ([]int64, error) {
	for tries := 1; ; tries++ {
		vals, err := r.doOnce(ctx, cmd, key, w)
		if err == nil || tries == maxDialRetries || !dialEndedByAnother(ctx, err) {
			return vals, err
		}
	}
}

// maxDialRetries bounds the sends of one call whose connection was dialed
// under other calls' ended contexts (see dialEndedByAnother).
const maxDialRetries = 3

// dialEndedByAnother reports whether err is a dial cancelled by a context
// that is not ctx, the call's own, which is still live. rueidis dials a
// missing connection once for every call waiting on it, under the context
// of the call that found it missing, and hands that dial's error to all of
// them: a caller that went away (an HTTP client gone, a cancelled wait)
// failed every call queued behind the dial with "operation was canceled",
// answered by their failure policies. Nothing was sent on a connection
// that was never made, so such a call is sent again; a script still runs
// at most once. A dial that timed out is not sent again: its error does
// not tell the caller's deadline from the dialer's own timeout.
func dialEndedByAnother(ctx context.Context, err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial" && errors.Is(err, context.Canceled) && ctx.Err() == nil
}

// doOnce is one send of do.
func (r rueidisConn) doOnce(ctx context.Context, cmd rueidis.Completed, key string, w Wait) ([]int64, error) {
	if w.Replicas == 0 {
		return rueidisInts(r.c.Do(ctx, cmd))
	}
	waitCmd := r.c.B().Wait().Numreplicas(w.Replicas).Timeout(w.TimeoutMillis()).Build().SetSlot(key)
	var res []rueidis.RedisResult
	if r.Cluster() {
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
	return vals, w.Check(acked)
}

func (r rueidisConn) Del(ctx context.Context, key string) error {
	return r.c.Do(ctx, r.c.B().Del().Key(key).Build()).Error()
}

func (rueidisConn) IsNoScript(err error) bool {
	e, ok := rueidis.IsRedisErr(err)
	return ok && e.IsNoScript()
}

func (r rueidisConn) FCall(ctx context.Context, fn string, keys, args []string, w Wait) ([]int64, error) {
	cmd := r.c.B().Fcall().Function(fn).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
	return r.do(ctx, cmd, keys[0], w)
}

// LoadLibrary loads src on every node of the client, and succeeds if one
// master took it. A replica (a Cluster client knows of them) answers
// READONLY: it gets the library from its master, as it gets every write.
func (r rueidisConn) LoadLibrary(ctx context.Context, src string) error {
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

func (rueidisConn) IsNoFunction(err error) bool {
	e, ok := rueidis.IsRedisErr(err)
	return ok && strings.TrimPrefix(e.Error(), "ERR ") == "Function not found"
}

func (r rueidisConn) Ping(ctx context.Context) error {
	return r.c.Do(ctx, r.c.B().Ping().Build()).Error()
}

func (r rueidisConn) Cluster() bool { return r.c.Mode() == rueidis.ClientModeCluster }

func (rueidisConn) CanWait(time.Duration) error { return nil }

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
