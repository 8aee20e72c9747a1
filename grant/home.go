package grant

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/share"
)

// Home hands out the shares of every limit it is asked about: one atomic
// step per call that first forgets the grants whose term and grace have
// passed, then grants, renews, lowers or takes back the caller's share,
// never letting the live shares of a limit add up to more than the limit.
// RedisHome is the home of a deployment; ScriptHome is the same home over
// a Redis client the caller has; MemHome runs the same step in process.
// Implementations are safe for concurrent use.
type Home interface {
	// Grant runs one step for r. An error means the call failed: over a
	// network it may or may not have run, which the protocol tolerates
	// (the package doc says why).
	Grant(ctx context.Context, r Request) (Grant, error)
}

// Request is one holder's call to its home about one key.
type Request struct {
	// Key names the limit's state (a region's global key, a Redis
	// store's state key, an RLQS bucket's key).
	Key string
	// Limit is the limit shared out: Limit units per Period. Its Period
	// also sets the boundaries a grant's term ends on.
	Limit floodgate.Limit
	// Holder names the caller, unique per process ("eu-west#3f9a…", see
	// Incarnation); a restarted process is a new holder, and the old
	// one's grant runs out on its own.
	Holder string
	// Now is the holder's clock, by which it counts its windows.
	Now time.Time
	// Term is how long the grant runs at least; it ends at the first
	// multiple of Period at or after Now+Term. Grace is how long after
	// that home keeps the share counted: the most two holders' clocks may
	// disagree.
	Term, Grace time.Duration
	// Want is the share the holder asks for. At or below what it holds,
	// it is granted as is (the holder has lowered its own decisions
	// first); above, home grants what the other holders leave free, and
	// never less than the holder already holds.
	Want int64
	// Demand is the holder's recent demand, in units per Period; Floor is
	// its floor. Home keeps both so that every holder can compute the
	// same split (Grant.Target).
	Demand, Floor int64
	// Release gives the whole share back and forgets the holder.
	Release bool
	// Keep asks for exactly what the holder holds (0 when it holds
	// nothing), whatever Want says: it renews the term and records Demand
	// and Floor without changing the share. A holder that comes back
	// under its old name (an Envoy's new stream) asks with Keep first, so
	// that it learns its share without giving it back while its old self
	// may still spend it.
	Keep bool
}

// Grant is home's answer to a Request: the holder's share and its term.
type Grant struct {
	// Share is the caller's share now; Until the end of its term (a
	// multiple of the Period on the caller's clock), zero after a release.
	Share int64
	Until time.Time
	// Parties and Shares are every live holder's demand and floor and
	// share, ordered by holder name; Self is the caller's index among
	// them (-1 after a release).
	Parties []share.Party
	Shares  []int64
	Self    int
}

// held is one holder's grant as home keeps it.
type held struct {
	share, untilUS, demand, floor int64
}

// step is the home's step on the grants of one key at the caller's time:
// the Go twin of scripts/home.lua, run by MemHome and checked against the
// script by TestHomeScriptMatchesStep. It changes grants in place.
func step(grants map[string]held, r Request) Grant {
	now := r.Now.UnixMicro()
	period := r.Limit.Period.Microseconds()
	grace, term := r.Grace.Microseconds(), r.Term.Microseconds()
	var others, cur, curUntil int64
	names := make([]string, 0, len(grants)+1)
	for name, l := range grants {
		if l.untilUS+grace <= now {
			delete(grants, name)
			continue
		}
		if name == r.Holder {
			cur, curUntil = l.share, l.untilUS
			continue
		}
		names = append(names, name)
		others += l.share
	}
	var out Grant
	out.Self = -1
	if r.Release {
		delete(grants, r.Holder)
	} else {
		want := min(r.Want, r.Limit.Limit)
		if r.Keep {
			want = cur
		}
		if want <= cur {
			out.Share = want
		} else {
			out.Share = min(want, max(cur, r.Limit.Limit-others))
		}
		ends := now + term
		until := max(curUntil, ceilTo(ends, period))
		out.Until = time.UnixMicro(until)
		grants[r.Holder] = held{out.Share, until, r.Demand, r.Floor}
		names = append(names, r.Holder)
	}
	slices.Sort(names)
	for i, name := range names {
		l := grants[name]
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

// MemHome is a Home in process: the grants of every key in a map, each
// call one step under a lock. It is for tests, for holders that share one
// process (one RLQS replica), and for regions in one process; a
// deployment's holders share a RedisHome. The zero value is ready to use.
type MemHome struct {
	mu   sync.Mutex
	keys map[string]map[string]held
}

var _ Home = (*MemHome)(nil)

// Grant runs one step; it fails only for an invalid request.
func (h *MemHome) Grant(ctx context.Context, r Request) (Grant, error) {
	if err := check(r); err != nil {
		return Grant{}, err
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

// check reports the first problem of r, before any store sees it.
func check(r Request) error {
	switch {
	case r.Key == "":
		return fmt.Errorf("grant: request: %w: key: empty", floodgate.ErrInvalidRequest)
	case r.Holder == "" || len(r.Holder) > 256:
		return fmt.Errorf("grant: request: %w: holder: %d bytes, want 1 to 256", floodgate.ErrInvalidRequest, len(r.Holder))
	case r.Limit.Period < time.Microsecond || r.Limit.Period > floodgate.MaxPeriod:
		return fmt.Errorf("grant: request: %w: period: %v", floodgate.ErrInvalidLimit, r.Limit.Period)
	case r.Limit.Limit < 0 || r.Limit.Limit > floodgate.MaxLimit:
		return fmt.Errorf("grant: request: %w: limit: %d", floodgate.ErrInvalidLimit, r.Limit.Limit)
	case r.Now.UnixMicro() <= 0:
		return fmt.Errorf("grant: request: %w: now: %v", floodgate.ErrInvalidRequest, r.Now)
	case r.Term <= 0 || r.Grace < 0:
		return fmt.Errorf("grant: request: %w: term %v and grace %v", floodgate.ErrInvalidRequest, r.Term, r.Grace)
	case r.Want < 0 || r.Demand < 0 || r.Floor < 0:
		return fmt.Errorf("grant: request: %w: want %d, demand %d, floor %d", floodgate.ErrInvalidRequest, r.Want, r.Demand, r.Floor)
	}
	return nil
}
