package grant

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/share"
)

// homeKeyEscaper escapes a key's hash-tag braces, its escape character and
// the mark of a hashed key; built once, not per call.
var homeKeyEscaper = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D", "#", "%23")

// homeKey is the Redis key of key's grants under period (a layout that
// running deployments hold, so it never changes):
//
//	<prefix>:v1:home:<period µs>:{<escaped key>}
//
// with '%', '{', '}' and '#' of key percent-escaped, so that no key can
// move the Cluster slot, and a key above 128 bytes replaced by '#' and its
// SHA-1.
func homeKey(prefix, key string, period time.Duration) string {
	enc := key
	if len(key) > 128 {
		sum := sha1.Sum([]byte(key))
		enc = "#" + hex.EncodeToString(sum[:])
	} else {
		enc = homeKeyEscaper.Replace(key)
	}
	return prefix + ":v1:home:" + strconv.FormatInt(period.Microseconds(), 10) + ":{" + enc + "}"
}

//go:embed scripts/home.lua
var homeLua string

var homeSHA = func() string {
	sum := sha1.Sum([]byte(homeLua))
	return hex.EncodeToString(sum[:])
}()

// DefaultPrefix is the prefix of the keys of a RedisHome, and of a
// ScriptHome made with an empty prefix.
const DefaultPrefix = "floodgate"

// RedisHome is the Home of a deployment: one Redis (standalone, or a
// Sentinel's master) that every holder reaches, running scripts/home.lua
// once per call, by EVALSHA, and by EVAL after NOSCRIPT (a restart, SCRIPT
// FLUSH). Every key it writes has a TTL set by the same script. Make one
// with OpenHome, DialHome or NewRedisHome; it is safe for concurrent use.
type RedisHome struct {
	prefix string
	owned  bool

	// c is the client; DialHome leaves it nil until the first call
	// connects, under mu, with o.
	mu     sync.Mutex
	c      rueidis.Client
	o      rueidis.ClientOption
	closed bool
}

var _ Home = (*RedisHome)(nil)

// NewRedisHome returns a Home over a rueidis client, which stays the
// caller's. prefix is put before every key; empty means
// DefaultPrefix.
func NewRedisHome(c rueidis.Client, prefix string) (*RedisHome, error) {
	if c == nil {
		return nil, errors.New("grant: NewRedisHome: nil client")
	}
	if strings.ContainsAny(prefix, "{}") {
		return nil, fmt.Errorf("grant: NewRedisHome: prefix %q contains a brace, which would change the keys' Cluster slot", prefix)
	}
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return &RedisHome{c: c, prefix: prefix}, nil
}

// OpenHome connects to the home Redis at rawURL (redis://, rediss:// or
// unix://, as rueidis.ParseURL reads them: redis://[user:password@]host:port[/db])
// and checks that it answers before ctx ends. Close closes the client.
func OpenHome(ctx context.Context, rawURL string) (*RedisHome, error) {
	o, err := rueidis.ParseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("grant: home URL: %w", err)
	}
	o.DisableCache = true
	if d, ok := ctx.Deadline(); ok {
		o.Dialer.Timeout = max(time.Until(d), time.Millisecond)
	}
	c, err := rueidis.NewClient(o)
	if err != nil {
		return nil, fmt.Errorf("grant: home %s: %w", o.InitAddress, err)
	}
	if err := c.Do(ctx, c.B().Ping().Build()).Error(); err != nil {
		c.Close()
		return nil, fmt.Errorf("grant: home %s: %w", o.InitAddress, err)
	}
	h, _ := NewRedisHome(c, "")
	h.owned = true
	return h, nil
}

// DialHome is OpenHome without the wait: the client connects at the first
// call that needs it, and a call while home is unreachable fails (a
// holder then decides on what it holds, as in a partition), so a holder
// can start while home is down. It fails only for a bad URL.
func DialHome(rawURL string) (*RedisHome, error) {
	o, err := rueidis.ParseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("grant: home URL: %w", err)
	}
	o.DisableCache = true
	return &RedisHome{prefix: DefaultPrefix, owned: true, o: o}, nil
}

// client returns the client, connecting it first if DialHome left it
// unconnected.
func (h *RedisHome) client(ctx context.Context) (rueidis.Client, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.c != nil {
		return h.c, nil
	}
	if h.closed {
		return nil, fmt.Errorf("grant: home: %w", floodgate.ErrClosed)
	}
	o := h.o
	if d, ok := ctx.Deadline(); ok {
		o.Dialer.Timeout = max(time.Until(d), time.Millisecond)
	}
	c, err := rueidis.NewClient(o)
	if err != nil {
		return nil, fmt.Errorf("grant: home %s: %w", o.InitAddress, err)
	}
	h.c = c
	return c, nil
}

// Close closes the client if OpenHome or DialHome made it.
func (h *RedisHome) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.owned && h.c != nil {
		h.c.Close()
		h.c = nil
	}
	h.closed = true
	return nil
}

// Grant runs one step of home.lua. An error means the call failed: it may
// or may not have run (a timeout cannot tell), which is safe either way,
// since a holder lowers its own decisions before it asks for less and
// uses more only once home granted it.
func (h *RedisHome) Grant(ctx context.Context, r Request) (Grant, error) {
	sh := ScriptHome{prefix: h.prefix, eval: h.eval}
	return sh.Grant(ctx, r)
}

// eval runs home.lua (sha, src) on key with args through the client:
// EVALSHA, and EVAL after NOSCRIPT, which means the script did not run.
func (h *RedisHome) eval(ctx context.Context, key, src, sha string, args []string) ([]int64, error) {
	c, err := h.client(ctx)
	if err != nil {
		return nil, err
	}
	res := c.Do(ctx, c.B().Evalsha().Sha1(sha).Numkeys(1).Key(key).Arg(args...).Build())
	if e, ok := rueidis.IsRedisErr(res.Error()); ok && e.IsNoScript() {
		res = c.Do(ctx, c.B().Eval().Script(src).Numkeys(1).Key(key).Arg(args...).Build())
	}
	return res.AsIntSlice()
}

// decodeGrant reads home.lua's reply, checking its shape.
func decodeGrant(v []int64) (Grant, error) {
	if len(v) < 5 || v[4] < 0 || int64(len(v)) != 5+3*v[4] || v[3] < 0 || v[3] > v[4] {
		return Grant{}, fmt.Errorf("%w: %v", floodgate.ErrUnexpectedReply, v)
	}
	out := Grant{Share: v[0], Self: int(v[3]) - 1}
	if v[1] > 0 {
		out.Until = time.UnixMicro(v[1])
	}
	for k := range int(v[4]) {
		d, f, s := v[5+3*k], v[6+3*k], v[7+3*k]
		out.Parties = append(out.Parties, share.Party{Demand: d, Floor: f})
		out.Shares = append(out.Shares, s)
	}
	return out, nil
}
