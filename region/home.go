package region

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/share"
)

// Home is the store that hands out the shares of every global limit: one
// atomic step per call that purges expired leases, then claims, renews,
// lowers or returns the caller's share, never letting the live shares add
// up to more than the limit. RedisHome is the home of a deployment;
// MemHome runs the same step in process, for tests and a single machine.
// Implementations are safe for concurrent use.
type Home interface {
	Lease(ctx context.Context, r LeaseRequest) (Lease, error)
}

// LeaseRequest is one holder's call to its home about one global key.
type LeaseRequest struct {
	// Key is the global key (the Limiter's key, with its prefix).
	Key string
	// Limit is the global limit: Limit units per window of Period.
	Limit floodgate.Limit
	// Holder names the caller: its region and the incarnation of its
	// process ("eu-west#3f9a…"); a restarted process is a new holder, and
	// the old one's lease runs out on its own.
	Holder string
	// Now is the holder's clock, by which it counts its windows.
	Now time.Time
	// Term is how long the lease runs at least; it ends at the first
	// window boundary at or after Now+Term. Grace is how long after that
	// home keeps the share counted: the most two holders' clocks may
	// disagree.
	Term, Grace time.Duration
	// Want is the share the holder asks for. At or below what it holds,
	// it is granted as is (the holder has lowered its own decisions
	// first); above, home grants what the other holders leave free, and
	// never less than the holder already holds.
	Want int64
	// Demand is the holder's recent demand, in units per Period; Floor is
	// its floor. Home keeps both so that every holder can compute the
	// same split (package share).
	Demand, Floor int64
	// Release gives the whole share back and forgets the holder.
	Release bool
}

// Lease is home's answer to a LeaseRequest.
type Lease struct {
	// Share is the caller's share now; Until the end of its lease (a
	// window boundary on the caller's clock), zero after a release.
	Share int64
	Until time.Time
	// Parties and Shares are every live holder's demand and floor and
	// share, ordered by holder name; Self is the caller's index among
	// them (-1 after a release).
	Parties []share.Party
	Shares  []int64
	Self    int
}

// held is one holder's lease as home keeps it.
type held struct {
	share, untilUS, demand, floor int64
}

// step is the home's step on the leases of one key at the caller's time:
// the Go twin of scripts/home.lua, run by MemHome and by the differential
// test. It changes leases in place.
func step(leases map[string]held, r LeaseRequest) Lease {
	now := r.Now.UnixMicro()
	period := r.Limit.Period.Microseconds()
	grace, term := r.Grace.Microseconds(), r.Term.Microseconds()
	var others, cur, curUntil int64
	names := make([]string, 0, len(leases)+1)
	for name, l := range leases {
		if l.untilUS+grace <= now {
			delete(leases, name)
			continue
		}
		if name == r.Holder {
			cur, curUntil = l.share, l.untilUS
			continue
		}
		names = append(names, name)
		others += l.share
	}
	var out Lease
	out.Self = -1
	if r.Release {
		delete(leases, r.Holder)
	} else {
		want := min(r.Want, r.Limit.Limit)
		if want <= cur {
			out.Share = want
		} else {
			out.Share = min(want, max(cur, r.Limit.Limit-others))
		}
		ends := now + term
		until := max(curUntil, ceilTo(ends, period))
		out.Until = time.UnixMicro(until)
		leases[r.Holder] = held{out.Share, until, r.Demand, r.Floor}
		names = append(names, r.Holder)
	}
	slices.Sort(names)
	for i, name := range names {
		l := leases[name]
		if name == r.Holder {
			out.Self = i
		}
		out.Parties = append(out.Parties, share.Party{Demand: l.demand, Floor: l.floor})
		out.Shares = append(out.Shares, l.share)
	}
	return out
}

// ceilTo is x rounded up to a multiple of p (x >= 0, p > 0).
func ceilTo(x, p int64) int64 {
	return (x + p - 1) - (x+p-1)%p
}

// MemHome is a Home in process: the leases of every key in a map, each
// call one step under a lock. It is for tests and for regions that share
// one process; a deployment's regions share a RedisHome. The zero value
// is ready to use.
type MemHome struct {
	mu   sync.Mutex
	keys map[string]map[string]held
}

var _ Home = (*MemHome)(nil)

// Lease runs one step; it fails only for an invalid request.
func (h *MemHome) Lease(ctx context.Context, r LeaseRequest) (Lease, error) {
	if err := checkLease(r); err != nil {
		return Lease{}, err
	}
	k := homeKey("", r.Key, r.Limit.Period)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.keys == nil {
		h.keys = make(map[string]map[string]held)
	}
	m := h.keys[k]
	if m == nil {
		m = make(map[string]held)
		h.keys[k] = m
	}
	out := step(m, r)
	if len(m) == 0 {
		delete(h.keys, k)
	}
	return out, nil
}

// checkLease reports the first problem of r, before any store sees it.
func checkLease(r LeaseRequest) error {
	switch {
	case r.Key == "":
		return fmt.Errorf("region: lease: %w: key: empty", floodgate.ErrInvalidRequest)
	case r.Holder == "" || len(r.Holder) > 256:
		return fmt.Errorf("region: lease: %w: holder: %d bytes, want 1 to 256", floodgate.ErrInvalidRequest, len(r.Holder))
	case r.Limit.Period < time.Microsecond || r.Limit.Period > floodgate.MaxPeriod:
		return fmt.Errorf("region: lease: %w: period: %v", floodgate.ErrInvalidLimit, r.Limit.Period)
	case r.Limit.Limit < 0 || r.Limit.Limit > floodgate.MaxLimit:
		return fmt.Errorf("region: lease: %w: limit: %d", floodgate.ErrInvalidLimit, r.Limit.Limit)
	case r.Now.UnixMicro() <= 0:
		return fmt.Errorf("region: lease: %w: now: %v", floodgate.ErrInvalidRequest, r.Now)
	case r.Term <= 0 || r.Grace < 0:
		return fmt.Errorf("region: lease: %w: term %v and grace %v", floodgate.ErrInvalidRequest, r.Term, r.Grace)
	case r.Want < 0 || r.Demand < 0 || r.Floor < 0:
		return fmt.Errorf("region: lease: %w: want %d, demand %d, floor %d", floodgate.ErrInvalidRequest, r.Want, r.Demand, r.Floor)
	}
	return nil
}

// homeKeyEscaper escapes a key's hash-tag braces, its escape character and
// the mark of a hashed key; built once, since a Replacer per call would be
// a large part of a lease's cost with the memory home.
var homeKeyEscaper = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D", "#", "%23")

// homeKey is the Redis key of key's leases under period:
//
//	<prefix>:v1:home:<period µs>:{<escaped key>}
//
// with '%', '{' and '}' of key percent-escaped, so that no key can move
// the Cluster slot, and a key above 128 bytes replaced by its SHA-1.
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

// DefaultHomePrefix is the prefix of RedisHome's keys.
const DefaultHomePrefix = "floodgate"

// RedisHome is the Home of a deployment: one Redis (standalone, or a
// Sentinel's master) that every region reaches, running scripts/home.lua
// once per call, by EVALSHA, and by EVAL after NOSCRIPT (a restart, SCRIPT
// FLUSH). Every key it writes has a TTL set by the same script. Make one
// with OpenHome or NewRedisHome; it is safe for concurrent use.
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
// DefaultHomePrefix.
func NewRedisHome(c rueidis.Client, prefix string) (*RedisHome, error) {
	if c == nil {
		return nil, errors.New("region: NewRedisHome: nil client")
	}
	if strings.ContainsAny(prefix, "{}") {
		return nil, fmt.Errorf("region: NewRedisHome: prefix %q contains a brace, which would change the keys' Cluster slot", prefix)
	}
	if prefix == "" {
		prefix = DefaultHomePrefix
	}
	return &RedisHome{c: c, prefix: prefix}, nil
}

// OpenHome connects to the home Redis at rawURL (redis://, rediss:// or
// unix://, as rueidis.ParseURL reads them: redis://[user:password@]host:port[/db])
// and checks that it answers before ctx ends. Close closes the client.
func OpenHome(ctx context.Context, rawURL string) (*RedisHome, error) {
	o, err := rueidis.ParseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("region: home URL: %w", err)
	}
	o.DisableCache = true
	if d, ok := ctx.Deadline(); ok {
		o.Dialer.Timeout = max(time.Until(d), time.Millisecond)
	}
	c, err := rueidis.NewClient(o)
	if err != nil {
		return nil, fmt.Errorf("region: home %s: %w", o.InitAddress, err)
	}
	if err := c.Do(ctx, c.B().Ping().Build()).Error(); err != nil {
		c.Close()
		return nil, fmt.Errorf("region: home %s: %w", o.InitAddress, err)
	}
	h, _ := NewRedisHome(c, "")
	h.owned = true
	return h, nil
}

// DialHome is OpenHome without the wait: the client connects at the first
// call that needs it, and a call while home is unreachable fails (a
// region then decides on what it holds, as in a partition), so a region
// can start while home is down. It fails only for a bad URL.
func DialHome(rawURL string) (*RedisHome, error) {
	o, err := rueidis.ParseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("region: home URL: %w", err)
	}
	o.DisableCache = true
	return &RedisHome{prefix: DefaultHomePrefix, owned: true, o: o}, nil
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
		return nil, fmt.Errorf("region: home: %w", floodgate.ErrClosed)
	}
	o := h.o
	if d, ok := ctx.Deadline(); ok {
		o.Dialer.Timeout = max(time.Until(d), time.Millisecond)
	}
	c, err := rueidis.NewClient(o)
	if err != nil {
		return nil, fmt.Errorf("region: home %s: %w", o.InitAddress, err)
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

// Lease runs one step of home.lua. An error means the call failed: it may
// or may not have run (a timeout cannot tell), which is safe either way,
// since a holder lowers its own decisions before it asks for less and
// uses more only once home granted it.
func (h *RedisHome) Lease(ctx context.Context, r LeaseRequest) (Lease, error) {
	sh := ScriptHome{prefix: h.prefix, eval: h.eval}
	return sh.Lease(ctx, r)
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

// decodeLease reads home.lua's reply, checking its shape.
func decodeLease(v []int64) (Lease, error) {
	if len(v) < 5 || v[4] < 0 || int64(len(v)) != 5+3*v[4] || v[3] < 0 || v[3] > v[4] {
		return Lease{}, fmt.Errorf("%w: %v", floodgate.ErrUnexpectedReply, v)
	}
	out := Lease{Share: v[0], Self: int(v[3]) - 1}
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
