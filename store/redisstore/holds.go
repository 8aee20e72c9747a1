package redisstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algorithm"
)

// The runner's side of reservations: it encodes the calls of the
// reservation scripts (reserve.lua, settle.lua, sweep.lua), runs them as
// it runs every script, and checks and decodes their replies.

// The status of a reserve, RESERVED ... RESERVE_LOST in reserve.lua.
const (
	reserveNew int64 = iota
	reserveReplayed
	reserveOtherKeys
	reserveConflict
	reserveLost
)

// The modes of a durable request's rebuild, REBUILD_NONE ...
// REBUILD_KNOWN in reserve.lua.
const (
	rebuildNone  = "0"
	rebuildCheck = "1"
	rebuildKnown = "2"
)

// The status of a settle, SETTLE_DONE ... SETTLE_CONFLICT in settle.lua.
const (
	settleDone int64 = iota
	settleUnknown
	settleOtherKeys
	settleConflict
)

// The modes of settle.lua.
const (
	modeSettle = "settle"
	modeDeny   = "deny"
	modeUndo   = "undo"
	modeRead   = "read"
)

// The outcomes of settle.lua's expire mode.
const (
	expireNotHeld int64 = iota
	expireNow
	expireNotDue
)

// bit is b as a script reads a flag: "1" or "0".
func bit(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// keysDigest is the digest of the state keys of a reservation that a
// hold keeps (see reserve.lua's reserve_replay): the first 16 bytes of the
// SHA-256 of the keys, sorted, in hex.
func keysDigest(cs []call) string {
	keys := make([]string, len(cs))
	for i := range cs {
		keys[i] = cs[i].key
	}
	slices.Sort(keys)
	h := sha256.New()
	for _, k := range keys {
		h.Write([]byte(k))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// holdKey is the key of the hold of reservation id on the state at key:
// in the slot of the state, since key's hash tag comes first.
func holdKey(key, id string) string { return key + ":hold:" + id }

// reserved is the reserve script's answer for the requests of one slot.
type reserved struct {
	status  int64
	expires int64 // µs of the requests' clock; 0 for a conflict
	ds      []floodgate.Decision
	// lost is, for reserveLost, the store's time (µs of the requests'
	// clock) of each request whose counter must be rebuilt, 0 for the
	// others.
	lost []int64
}

// held reports whether the answer holds units: a new or replayed reserve
// that was admitted.
func (r *reserved) held() bool {
	return (r.status == reserveNew || r.status == reserveReplayed) && r.ds[0].Allowed
}

// reserve runs the reserve script for cs, stamped, whose holds are at
// holds: ttl and retention in µs, clock the sweep clock's now (-1:
// the server's TIME); part says that cs are the requests of one slot of a
// reservation over several, and digest is keysDigest of them all. rb, if
// set, is the floodgate.Rebuild of each of cs.
func (rn *runner) reserve(ctx context.Context, cs []call, holds []string, rb []floodgate.Rebuild, ttl, retention, clock int64, release, part bool, digest string) (reserved, error) {
	keys := make([]string, 0, 2*len(cs))
	args := make([]string, 0, 6+len(cs)*(4+argsPerRequest))
	args = append(args, strconv.FormatInt(ttl, 10), bit(release), strconv.FormatInt(retention, 10), strconv.FormatInt(clock, 10), bit(part), digest)
	for i := range cs {
		c := &cs[i]
		keys = append(keys, c.key, holds[i])
		args = append(args, string(c.alg))
		args = appendRequest(args, &c.r, c.alg, c.now)
	}
	durable := rb != nil
	for i := range cs {
		durable = durable || cs[i].r.Limit.Durable
	}
	for i := range cs {
		if !durable {
			break
		}
		args = append(args, bit(cs[i].r.Limit.Durable))
		var b floodgate.Rebuild
		if rb != nil {
			b = rb[i]
		}
		switch {
		case b.Known:
			args = append(args, rebuildKnown, strconv.FormatInt(b.Window.UnixMicro(), 10), strconv.FormatInt(b.Units, 10))
		case b.Check:
			args = append(args, rebuildCheck, "0", "0")
		default:
			args = append(args, rebuildNone, "0", "0")
		}
	}
	vals, err := rn.run(ctx, scripts.reserve, keys, args)
	if err != nil {
		return reserved{}, fmt.Errorf("redisstore: reserve %s: %w", holds[0], err)
	}
	bad := func(format string, a ...any) (reserved, error) {
		return reserved{}, fmt.Errorf("redisstore: reserve %s: %w: "+format, append([]any{holds[0], floodgate.ErrUnexpectedReply}, a...)...)
	}
	if len(vals) < 2 {
		return bad("%d integers", len(vals))
	}
	r := reserved{status: vals[0], expires: vals[1]}
	switch r.status {
	case reserveOtherKeys, reserveConflict:
		if len(vals) != 2 {
			return bad("%d integers for a conflict", len(vals))
		}
		return r, nil
	case reserveLost:
		if len(vals) != 2+len(cs) {
			return bad("%d integers for lost counters", len(vals))
		}
		r.lost = make([]int64, len(cs))
		for i, v := range vals[2:] {
			if v < 0 || v > algorithm.MaxExact {
				return bad("lost at %d", v)
			}
			r.lost[i] = v
		}
		return r, nil
	case reserveNew, reserveReplayed:
	default:
		return bad("status %d", r.status)
	}
	if len(vals) != 2+replyLen*len(cs) {
		return bad("%d integers, want %d", len(vals), 2+replyLen*len(cs))
	}
	if r.expires <= 0 || r.expires > algorithm.MaxExact {
		return bad("expires_us %d", r.expires)
	}
	r.ds = make([]floodgate.Decision, len(cs))
	allowed := 0
	for i := range cs {
		if r.ds[i], err = decode(vals[2+i*replyLen:2+(i+1)*replyLen], cs[i].now); err != nil {
			return reserved{}, fmt.Errorf("redisstore: reserve %s: %w", holds[i], err)
		}
		if r.ds[i].Allowed {
			allowed++
		}
	}
	if allowed != 0 && allowed != len(cs) {
		return bad("%d of %d allowed, want all or none", allowed, len(cs))
	}
	return r, nil
}

// slotStatus is the head of the settle script's reply for the holds of
// one slot, in either mode: its status, and for settleConflict the state
// and actual of the hold that conflicts.
type slotStatus struct {
	status, state, actual int64
}

// holdsErr is the error of a settle (or a read) of reservation id whose
// slots answered sts: nil when every slot found its holds and none
// conflicts. Some slots without the holds and some with them is a
// reservation of other keys.
func holdsErr(id string, sts []slotStatus) error {
	unknown := 0
	for _, st := range sts {
		switch st.status {
		case settleUnknown:
			unknown++
		case settleOtherKeys:
			return fmt.Errorf("redisstore: reservation %s: %w: it holds other keys", id, floodgate.ErrConflict)
		case settleConflict:
			return fmt.Errorf("redisstore: reservation %s: %w: it was settled otherwise (%s)", id, floodgate.ErrConflict, settledAs(st.state, st.actual))
		}
	}
	switch unknown {
	case 0:
		return nil
	case len(sts):
		return fmt.Errorf("redisstore: reservation %s: %w", id, floodgate.ErrUnknownReservation)
	}
	return fmt.Errorf("redisstore: reservation %s: %w: it holds other keys", id, floodgate.ErrConflict)
}

// settled is the settle script's answer for the holds of one slot.
type settled struct {
	slotStatus
	codes []algorithm.SettleCode
	sts   []floodgate.Settlement
}

// settleWidth is the integers of one hold in the settle script's reply:
// code, refunded, charged, short, durable, then a decision.
const settleWidth = 5 + replyLen

// settle runs the settle script in mode for the holds at holds of cs,
// stamped: a commit of actual, or a cancel.
func (rn *runner) settle(ctx context.Context, mode string, cs []call, holds []string, actual int64, cancel bool, clock int64) (settled, error) {
	keys := make([]string, 0, 2*len(cs))
	args := make([]string, 0, 4+len(cs)*(1+argsPerRequest))
	args = append(args, mode, strconv.FormatInt(actual, 10), bit(cancel), strconv.FormatInt(clock, 10))
	for i := range cs {
		c := &cs[i]
		keys = append(keys, c.key, holds[i])
		args = append(args, string(c.alg))
		args = appendRequest(args, &c.r, c.alg, c.now)
	}
	vals, err := rn.run(ctx, scripts.settle, keys, args)
	if err != nil {
		return settled{}, fmt.Errorf("redisstore: %s %s: %w", mode, holds[0], err)
	}
	bad := func(format string, a ...any) (settled, error) {
		return settled{}, fmt.Errorf("redisstore: %s %s: %w: "+format, append([]any{mode, holds[0], floodgate.ErrUnexpectedReply}, a...)...)
	}
	if len(vals) < 3 {
		return bad("%d integers", len(vals))
	}
	r := settled{slotStatus: slotStatus{status: vals[0], state: vals[1], actual: vals[2]}}
	switch r.status {
	case settleUnknown, settleOtherKeys, settleConflict:
		if len(vals) != 3 {
			return bad("%d integers for status %d", len(vals), r.status)
		}
		return r, nil
	case settleDone:
	default:
		return bad("status %d", r.status)
	}
	if len(vals) != 3+settleWidth*len(cs) {
		return bad("%d integers, want %d", len(vals), 3+settleWidth*len(cs))
	}
	r.codes = make([]algorithm.SettleCode, len(cs))
	r.sts = make([]floodgate.Settlement, len(cs))
	for i := range cs {
		v := vals[3+i*settleWidth : 3+(i+1)*settleWidth]
		code, refunded, charged, short, durable := v[0], v[1], v[2], v[3], v[4]
		switch {
		case code < int64(algorithm.Settled) || code > int64(algorithm.TooLate):
			return bad("code %d", code)
		case durable != 0 && durable != 1:
			return bad("durable %d", durable)
		case refunded < 0 || charged < 0 || short < 0 || refunded > algorithm.MaxLimit || charged > algorithm.MaxLimit || short > algorithm.MaxLimit:
			return bad("settlement %d, %d, %d", refunded, charged, short)
		}
		d, err := decode(v[5:], cs[i].now)
		if err != nil {
			return settled{}, fmt.Errorf("redisstore: %s %s: %w", mode, holds[i], err)
		}
		r.codes[i] = algorithm.SettleCode(code)
		r.sts[i] = floodgate.Settlement{Refunded: refunded, Charged: charged, Short: short, Replayed: code == int64(algorithm.Replayed),
			Durable: durable == 1, Decision: d}
	}
	return r, nil
}

// read is the settle script's read mode's answer for the holds of one
// slot: the status of a settle, and what each hold holds.
type read struct {
	slotStatus
	codes []algorithm.SettleCode
	held  []floodgate.HeldUnits
}

// readWidth is the integers of one hold in the read mode's reply: code,
// units, durable, window_us.
const readWidth = 4

// read runs the settle script's read mode for the holds at holds of cs,
// stamped: what a settle of actual (or a cancel) would answer, changing
// nothing.
func (rn *runner) read(ctx context.Context, cs []call, holds []string, actual int64, cancel bool, clock int64) (read, error) {
	keys := make([]string, 0, 2*len(cs))
	args := make([]string, 0, 4+len(cs)*(1+argsPerRequest))
	args = append(args, modeRead, strconv.FormatInt(actual, 10), bit(cancel), strconv.FormatInt(clock, 10))
	for i := range cs {
		c := &cs[i]
		keys = append(keys, c.key, holds[i])
		args = append(args, string(c.alg))
		args = appendRequest(args, &c.r, c.alg, c.now)
	}
	vals, err := rn.run(ctx, scripts.settle, keys, args)
	if err != nil {
		return read{}, fmt.Errorf("redisstore: read %s: %w", holds[0], err)
	}
	bad := func(format string, a ...any) (read, error) {
		return read{}, fmt.Errorf("redisstore: read %s: %w: "+format, append([]any{holds[0], floodgate.ErrUnexpectedReply}, a...)...)
	}
	if len(vals) < 3 {
		return bad("%d integers", len(vals))
	}
	r := read{slotStatus: slotStatus{status: vals[0], state: vals[1], actual: vals[2]}}
	switch r.status {
	case settleUnknown, settleOtherKeys, settleConflict:
		if len(vals) != 3 {
			return bad("%d integers for status %d", len(vals), r.status)
		}
		return r, nil
	case settleDone:
	default:
		return bad("status %d", r.status)
	}
	if len(vals) != 3+readWidth*len(cs) {
		return bad("%d integers, want %d", len(vals), 3+readWidth*len(cs))
	}
	r.codes = make([]algorithm.SettleCode, len(cs))
	r.held = make([]floodgate.HeldUnits, len(cs))
	for i := range cs {
		v := vals[3+i*readWidth : 3+(i+1)*readWidth]
		code, units, durable, window := v[0], v[1], v[2], v[3]
		switch {
		case code < int64(algorithm.Settled) || code > int64(algorithm.TooLate):
			return bad("code %d", code)
		case durable != 0 && durable != 1:
			return bad("durable %d", durable)
		case units < 0 || units > algorithm.MaxLimit:
			return bad("units %d", units)
		case window < 0 || window > algorithm.MaxExact:
			return bad("window_us %d", window)
		}
		r.codes[i] = algorithm.SettleCode(code)
		r.held[i] = floodgate.HeldUnits{Units: units, Durable: durable == 1, Replayed: code == int64(algorithm.Replayed)}
		if durable == 1 {
			r.held[i].Window = time.UnixMicro(window).UTC()
		}
	}
	return r, nil
}

// expired is the outcome of the expire mode for one hold.
type expired struct {
	outcome, refunded, due int64
}

// expire runs the settle script's expire mode on the holds at holds, of
// the states at states: each expires if its time has come at clock (the
// sweep clock's now; -1: the server's TIME).
func (rn *runner) expire(ctx context.Context, states, holds []string, clock int64) ([]expired, error) {
	keys := make([]string, 0, 2*len(holds))
	for i := range holds {
		keys = append(keys, states[i], holds[i])
	}
	vals, err := rn.run(ctx, scripts.settle, keys, []string{"expire", "0", "0", strconv.FormatInt(clock, 10)})
	if err != nil {
		return nil, fmt.Errorf("redisstore: expire %s: %w", holds[0], err)
	}
	if len(vals) != 3*len(holds) {
		return nil, fmt.Errorf("redisstore: expire %s: %w: %d integers, want %d", holds[0], floodgate.ErrUnexpectedReply, len(vals), 3*len(holds))
	}
	out := make([]expired, len(holds))
	for i := range out {
		e := expired{vals[3*i], vals[3*i+1], vals[3*i+2]}
		if e.outcome < expireNotHeld || e.outcome > expireNotDue || e.refunded < 0 || e.due < 0 || e.due > algorithm.MaxExact {
			return nil, fmt.Errorf("redisstore: expire %s: %w: %v", holds[i], floodgate.ErrUnexpectedReply, e)
		}
		out[i] = e
	}
	return out, nil
}

// index runs the sweep script's op on the index at key, at clock (-1:
// the server's TIME), with args.
func (rn *runner) index(ctx context.Context, key, op string, clock int64, args ...string) ([]int64, error) {
	vals, err := rn.run(ctx, scripts.sweep, []string{key}, append([]string{op, strconv.FormatInt(clock, 10)}, args...))
	if err != nil {
		return nil, fmt.Errorf("redisstore: holds index %s %s: %w", op, key, err)
	}
	return vals, nil
}

// due claims at most n members of the index at key due at clock, for
// lease µs, and returns them.
func (rn *runner) due(ctx context.Context, key string, clock int64, n int, lease int64) ([]string, error) {
	vals, err := rn.index(ctx, key, "due", clock, strconv.Itoa(n), strconv.FormatInt(lease, 10))
	if err != nil {
		return nil, err
	}
	members, err := decodeStrings(vals)
	if err != nil || len(members) > n {
		return nil, fmt.Errorf("redisstore: holds index due %s: %w: %d members, %v", key, floodgate.ErrUnexpectedReply, len(members), err)
	}
	return members, nil
}

// decodeStrings decodes strings sent as integers: their count, then each
// one's length and bytes.
func decodeStrings(vals []int64) ([]string, error) {
	if len(vals) == 0 || vals[0] < 0 || vals[0] > int64(len(vals)) {
		return nil, fmt.Errorf("%w: %d integers", floodgate.ErrUnexpectedReply, len(vals))
	}
	out := make([]string, 0, vals[0])
	i := 1
	for range vals[0] {
		if i >= len(vals) || vals[i] < 0 || vals[i] > int64(len(vals)-i-1) {
			return nil, fmt.Errorf("%w: string %d runs past the reply", floodgate.ErrUnexpectedReply, len(out))
		}
		b := make([]byte, vals[i])
		for j := range b {
			v := vals[i+1+j]
			if v < 0 || v > 255 {
				return nil, fmt.Errorf("%w: byte %d", floodgate.ErrUnexpectedReply, v)
			}
			b[j] = byte(v)
		}
		out = append(out, string(b))
		i += 1 + len(b)
	}
	if i != len(vals) {
		return nil, fmt.Errorf("%w: %d integers after the strings", floodgate.ErrUnexpectedReply, len(vals)-i)
	}
	return out, nil
}
