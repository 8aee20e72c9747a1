package memstore

// ref names one state in a shard: the (key, period) pair and its hash,
// computed once per request by Store.ref and used for both the shard and
// the lookup, so the key's bytes are hashed once per decision.
type ref struct {
	hash uint64
	mkey
}

// tentry is an entry of a table's primary part, with the (key, period) it
// belongs to and its hash: two pairs may share a 64-bit hash.
type tentry[V any] struct {
	hash   uint64
	key    string
	period int64
	v      V
}

// table maps (key, period) pairs to V. Primary entries live in a slice,
// ents, indexed by a map from the pair's 64-bit hash to the entry's
// position: Go's maps look a uint64 up without hashing or comparing the
// key's bytes again, the entry holds the pair for a lookup to compare, and
// a value is changed in place in the slice, without a map assignment. A
// pair whose hash is already taken by another pair goes to over, keyed by
// the pair itself. With a seeded 64-bit hash that is rare (about n²/2^65
// pairs for n keys in a shard), but it keeps every lookup exact whatever
// the keys.
//
// A pair lives in at most one of the two parts: put updates it where it is
// and only places a new pair, in the primary part if its hash is free,
// otherwise in over. Deleting a primary entry may leave a pair of the same
// hash in over, so a lookup that misses in the primary part looks in over
// whenever over is not empty. A deletion moves the last entry of ents into
// the hole, so ents stays dense; sweep gives back the slice's memory when
// it is mostly empty.
//
// bytes is the table's accounted size (see Options.MaxBytes): keyBytes
// for each pair, plus each value's extraBytes as it was when the value
// was put or last accounted (account), so that what a removal takes off
// is exactly what was added.
type table[V sized] struct {
	idx   map[uint64]int // hash → position in ents
	ents  []tentry[V]
	over  map[mkey]V // nil until a first collision
	bytes int64
	// last is the position in ents where find last found a pair by idx,
	// and lastHash that pair's hash: a key decided again and again (a hot
	// key) is found without the map. Nothing keeps them up to date: find
	// trusts the entry at last only after comparing its hash, key and
	// period, and a pair has one entry, so a stale last can only miss.
	last     int
	lastHash uint64
}

// sized is a table's value: extraBytes is what it holds beyond its
// entry, as accounted (0 for the O(1) states).
type sized interface {
	extraBytes() int64
}

func newTable[V sized]() table[V] {
	return table[V]{idx: make(map[uint64]int)}
}

// where says where find found a pair: its position in ents (>= 0),
// inOver, or absent.
type where int

const (
	absent where = -1 - iota
	inOver
)

func (t *table[V]) get(r ref) (V, bool) {
	v, w := t.find(r)
	return v, w != absent
}

// hot returns the primary entry of r if it is where find last found a
// pair, else nil: find's first step, for a caller that changes the
// value in place (Store.DecideSmall). The entry is valid until the
// table next changes.
func (t *table[V]) hot(r ref) *tentry[V] {
	if i := t.last; t.lastHash == r.hash && uint(i) < uint(len(t.ents)) {
		if e := &t.ents[i]; e.hash == r.hash && e.key == r.key && e.period == r.period {
			return e
		}
	}
	return nil
}

// find is get that also says where the pair is, for set.
func (t *table[V]) find(r ref) (V, where) {
	if i := t.last; t.lastHash == r.hash && uint(i) < uint(len(t.ents)) {
		if e := &t.ents[i]; e.hash == r.hash && e.key == r.key && e.period == r.period {
			return e.v, where(i)
		}
	}
	if i, ok := t.idx[r.hash]; ok {
		if e := &t.ents[i]; e.key == r.key && e.period == r.period {
			t.last, t.lastHash = i, r.hash
			return e.v, where(i)
		}
	}
	if len(t.over) > 0 {
		if v, ok := t.over[r.mkey]; ok {
			return v, inOver
		}
	}
	var zero V
	return zero, absent
}

// set is put for a pair that find just reported at w, with no change to
// the table in between: it skips put's lookup when the pair is present.
// It keeps the accounted size only for values whose extraBytes is 0 (the
// O(1) states, whose tables it serves): the hot path pays no call for it.
func (t *table[V]) set(r ref, v V, w where) {
	switch {
	case w >= 0:
		t.ents[w].v = v
	case w == inOver:
		t.over[r.mkey] = v
	default:
		t.put(r, v)
	}
}

func (t *table[V]) put(r ref, v V) {
	i, ok := t.idx[r.hash]
	switch {
	case ok && t.ents[i].key == r.key && t.ents[i].period == r.period:
		t.bytes += v.extraBytes() - t.ents[i].v.extraBytes()
		t.ents[i].v = v
		return
	case len(t.over) > 0 && t.inOver(r.mkey):
		t.bytes += v.extraBytes() - t.over[r.mkey].extraBytes()
		t.over[r.mkey] = v
		return
	case ok:
		if t.over == nil {
			t.over = make(map[mkey]V)
		}
		t.over[r.mkey] = v
		t.bytes += keyBytes(len(r.key)) + v.extraBytes()
		return
	}
	t.bytes += keyBytes(len(r.key)) + v.extraBytes()
	t.idx[r.hash] = len(t.ents)
	t.ents = append(t.ents, tentry[V]{hash: r.hash, key: r.key, period: r.period, v: v})
}

func (t *table[V]) inOver(k mkey) bool {
	_, ok := t.over[k]
	return ok
}

func (t *table[V]) del(r ref) {
	if i, ok := t.idx[r.hash]; ok && t.ents[i].key == r.key && t.ents[i].period == r.period {
		t.removeAt(i)
		return
	}
	if len(t.over) > 0 {
		if v, ok := t.over[r.mkey]; ok {
			t.bytes -= keyBytes(len(r.key)) + v.extraBytes()
			delete(t.over, r.mkey)
		}
	}
}

// removeAt deletes the primary entry at i, moving the last entry there.
func (t *table[V]) removeAt(i int) {
	last := len(t.ents) - 1
	t.bytes -= keyBytes(len(t.ents[i].key)) + t.ents[i].v.extraBytes()
	delete(t.idx, t.ents[i].hash)
	if i != last {
		t.ents[i] = t.ents[last]
		t.idx[t.ents[i].hash] = i
	}
	t.ents[last] = tentry[V]{} // let the key and value be collected
	t.ents = t.ents[:last]
}

func (t *table[V]) len() int { return len(t.ents) + len(t.over) }

// sweep deletes every value for which expired is true and returns how many
// it deleted. When the primary entries fill under a quarter of their
// slice, it moves them to a smaller one.
func (t *table[V]) sweep(expired func(V) bool) int {
	n := 0
	// Backwards, so that the entry removeAt moves into i was already seen.
	for i := len(t.ents) - 1; i >= 0; i-- {
		if expired(t.ents[i].v) {
			t.removeAt(i)
			n++
		}
	}
	if c := cap(t.ents); c > 64 && len(t.ents) < c/4 {
		t.ents = append(make([]tentry[V], 0, 2*len(t.ents)), t.ents...)
	}
	for k, v := range t.over {
		if expired(v) {
			t.bytes -= keyBytes(len(k.key)) + v.extraBytes()
			delete(t.over, k)
			n++
		}
	}
	return n
}
