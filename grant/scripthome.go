package grant

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// EvalFunc runs a Lua script on one key of a Redis and returns its reply,
// an array of integers: by its SHA-1 digest sha, and by its source src
// when the server does not have it (NOSCRIPT). It must not send the script
// again after a network error or a timeout: a call that may have run is an
// error, not a repeat.
type EvalFunc func(ctx context.Context, key, src, sha string, args []string) ([]int64, error)

// ScriptHome is a Home over a client the caller already has, running the
// same script as RedisHome (scripts/home.lua) through an EvalFunc, so that
// this package needs no part of the caller's client. The Redis store uses
// it to grant slices of a token bucket's or GCRA's rate to its instances
// (floodgate.Limit.LocalBudget) on the Redis it decides on, with the same
// protocol, and its guarantees, as regions.
type ScriptHome struct {
	prefix string
	eval   EvalFunc
}

var _ Home = (*ScriptHome)(nil)

// NewScriptHome returns a Home whose keys start with prefix (empty means
// DefaultPrefix) and whose calls run through eval.
func NewScriptHome(prefix string, eval EvalFunc) (*ScriptHome, error) {
	if eval == nil {
		return nil, errors.New("grant: NewScriptHome: nil EvalFunc")
	}
	if strings.ContainsAny(prefix, "{}") {
		return nil, fmt.Errorf("grant: NewScriptHome: prefix %q contains a brace, which would change the keys' Cluster slot", prefix)
	}
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return &ScriptHome{prefix: prefix, eval: eval}, nil
}

// Grant runs one step of home.lua through the EvalFunc; an error means the
// call may or may not have run, which is safe for the reason RedisHome.Grant
// gives.
func (h *ScriptHome) Grant(ctx context.Context, r Request) (Grant, error) {
	if err := check(r); err != nil {
		return Grant{}, err
	}
	key := homeKey(h.prefix, r.Key, r.Limit.Period)
	i := func(n int64) string { return strconv.FormatInt(n, 10) }
	release := "0"
	if r.Release {
		release = "1"
	}
	args := []string{r.Holder, i(r.Now.UnixMicro()), i(r.Limit.Limit), i(r.Limit.Period.Microseconds()),
		i(r.Term.Microseconds()), i(r.Grace.Microseconds()), i(r.Want), i(r.Demand), i(r.Floor), release}
	if r.Keep {
		args = append(args, "1")
	}
	vals, err := h.eval(ctx, key, homeLua, homeSHA, args)
	if err != nil {
		return Grant{}, fmt.Errorf("grant: home %s: %w", key, err)
	}
	out, err := decodeGrant(vals)
	if err != nil {
		return Grant{}, fmt.Errorf("grant: home %s: %w", key, err)
	}
	return out, nil
}
