package memstore

// ref names one state in a shard: the (key, period) pair and its hash,
// computed once per request by Store.ref and used for both the shard and
// the lookup, so the key's bytes are hashed once per decision.
type ref struct {
	hash uint64
	mkey
}

// tentry is a value of a table's primary map, with the (key, period) it
// belongs to: two pairs may share a 64-bit hash.
type tentry[V any] struct {
	key    string
	period int64
	v      V
}

// table maps (key, period) pairs to V. The primary map is keyed by the
// pair's 64-bit hash, which Go's maps look up without hashing or comparing
// the key's bytes again; the entry holds the pair, and a lookup compares
// it. A pair whose hash is already taken by another pair goes to over,
// keyed by the pair itself. With a seeded 64-bit hash that is rare (about
// n²/2^65 pairs for n keys in a shard), but it keeps every lookup exact
// whatever the keys.
//
// A pair lives in at most one of the two maps: put updates it where it is
// and only places a new pair, in the primary map if its hash is free,
// otherwise in over. Deleting a primary entry may leave a pair of the same
// hash in over, so a lookup that misses in the primary map looks in over
// whenever over is not empty.
type table[V any] struct {
	m    map[uint64]tentry[V]
	over map[mkey]V // nil until a first collision
}

func newTable[V any]() table[V] {
	return table[V]{m: make(map[uint64]tentry[V])}
}

// where says in which map a pair was found.
type where uint8

const (
	absent where = iota
	inPrimary
	inOver
)

func (t *table[V]) get(r ref) (V, bool) {
	v, w := t.find(r)
	return v, w != absent
}

// find is get that also says where the pair is, for set.
func (t *table[V]) find(r ref) (V, where) {
	if e, ok := t.m[r.hash]; ok && e.key == r.key && e.period == r.period {
		return e.v, inPrimary
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
func (t *table[V]) set(r ref, v V, w where) {
	switch w {
	case inPrimary:
		t.m[r.hash] = tentry[V]{key: r.key, period: r.period, v: v}
	case inOver:
		t.over[r.mkey] = v
	default:
		t.put(r, v)
	}
}

func (t *table[V]) put(r ref, v V) {
	e, ok := t.m[r.hash]
	switch {
	case ok && e.key == r.key && e.period == r.period:
	case len(t.over) > 0 && t.inOver(r.mkey):
		t.over[r.mkey] = v
		return
	case ok:
		if t.over == nil {
			t.over = make(map[mkey]V)
		}
		t.over[r.mkey] = v
		return
	}
	t.m[r.hash] = tentry[V]{key: r.key, period: r.period, v: v}
}

func (t *table[V]) inOver(k mkey) bool {
	_, ok := t.over[k]
	return ok
}

func (t *table[V]) del(r ref) {
	if e, ok := t.m[r.hash]; ok && e.key == r.key && e.period == r.period {
		delete(t.m, r.hash)
		return
	}
	if len(t.over) > 0 {
		delete(t.over, r.mkey)
	}
}

func (t *table[V]) len() int { return len(t.m) + len(t.over) }

// sweep deletes every value for which expired is true and returns how many
// it deleted.
func (t *table[V]) sweep(expired func(V) bool) int {
	n := 0
	for h, e := range t.m {
		if expired(e.v) {
			delete(t.m, h)
			n++
		}
	}
	for k, v := range t.over {
		if expired(v) {
			delete(t.over, k)
			n++
		}
	}
	return n
}
