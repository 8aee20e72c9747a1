package memstore

import (
	"testing"

	"github.com/floodgate-rl/floodgate/algorithm"
)

// tval is a table value of no accounted extra size, as a slot: the
// table's bytes are its keys'.
type tval int

func (tval) extraBytes() int64 { return 0 }

// TestTableCollisions drives a table through pairs that share one hash,
// which a seeded 64-bit hash practically never produces, and checks it
// against a plain map after every step.
func TestTableCollisions(t *testing.T) {
	const h = 42
	a := ref{hash: h, mkey: mkey{"a", 1}}
	b := ref{hash: h, mkey: mkey{"b", 1}}
	c := ref{hash: h, mkey: mkey{"a", 2}}
	d := ref{hash: h + 1, mkey: mkey{"d", 1}}
	e := ref{hash: h + 2, mkey: mkey{"e", 1}}
	tb := newTable[tval]()
	want := map[mkey]tval{}
	check := func(step string) {
		t.Helper()
		for _, r := range []ref{a, b, c, d, e} {
			got, ok := tb.get(r)
			w, wok := want[r.mkey]
			if got != w || ok != wok {
				t.Errorf("after %s: get(%v) = %d, %v; want %d, %v", step, r.mkey, got, ok, w, wok)
			}
		}
		var bytes int64
		for k, v := range want {
			bytes += keyBytes(len(k.key)) + v.extraBytes()
		}
		if tb.bytes != bytes {
			t.Errorf("after %s: bytes = %d, want %d", step, tb.bytes, bytes)
		}
		if got, w := tb.len(), len(want); got != w {
			t.Errorf("after %s: len = %d, want %d", step, got, w)
		}
	}
	put := func(r ref, v tval) {
		t.Helper()
		tb.put(r, v)
		want[r.mkey] = v
		check("put " + r.key)
	}
	del := func(r ref) {
		t.Helper()
		tb.del(r)
		delete(want, r.mkey)
		check("del " + r.key)
	}
	const inPrimary where = 0 // any position in ents
	put(a, 1)
	put(b, 2) // collides with a: goes to over
	put(c, 3) // same key as a, other period, same hash: over
	put(d, 4)
	if got := len(tb.over); got != 2 {
		t.Errorf("%d pairs in over, want 2", got)
	}
	put(e, 1)
	del(d) // not the last entry: e moves into its place
	put(d, 4)
	del(a)    // frees the primary slot while b and c stay in over
	put(b, 5) // b is in over: updated there, not duplicated into the primary map
	if got := len(tb.over); got != 2 {
		t.Errorf("%d pairs in over after updating b, want 2", got)
	}
	set := func(r ref, v tval, at where) {
		t.Helper()
		_, w := tb.find(r)
		if w != at && !(at == inPrimary && w >= 0) {
			t.Errorf("find(%v) reports %d, want %d", r.mkey, w, at)
		}
		tb.set(r, v, w)
		want[r.mkey] = v
		check("set " + r.key)
	}
	set(c, 2, inOver)
	set(d, 3, inPrimary)
	set(a, 4, absent)
	del(a)
	put(a, 6) // the primary slot is free again
	del(b)
	del(b) // absent: no effect
	put(b, 7)
	if got, w := tb.sweep(func(v tval) bool { return v >= 6 }), 2; got != w {
		t.Errorf("sweep dropped %d, want %d", got, w)
	}
	delete(want, a.mkey)
	delete(want, b.mkey)
	check("sweep")
	del(c)
	del(d)
	del(e)
	if tb.len() != 0 {
		t.Errorf("len = %d after deleting everything", tb.len())
	}
}

// TestTableSweepShrinks checks that a sweep that leaves the entry slice
// under a quarter full moves the entries to a smaller slice, and that
// every pair left is still found at its new position.
func TestTableSweepShrinks(t *testing.T) {
	tb := newTable[tval]()
	refs := make([]ref, 200)
	for i := range refs {
		refs[i] = ref{hash: uint64(i) * 7919, mkey: mkey{"k", int64(i)}}
		tb.put(refs[i], tval(i))
	}
	before := cap(tb.ents)
	if got := tb.sweep(func(v tval) bool { return v%20 != 0 }); got != 190 {
		t.Fatalf("sweep dropped %d, want 190", got)
	}
	if c := cap(tb.ents); c >= before/4 {
		t.Errorf("cap(ents) = %d after sweeping to %d entries, want under %d", c, len(tb.ents), before/4)
	}
	for i, r := range refs {
		v, ok := tb.get(r)
		if want := i%20 == 0; ok != want || ok && v != tval(i) {
			t.Errorf("get(%v) = %d, %v; want %d, %v", r.mkey, v, ok, i, want)
		}
	}
	if tb.len() != 10 {
		t.Errorf("len = %d, want 10", tb.len())
	}
}

// TestSmallKindsFirst checks what the shard's small tables rely on: the
// Kinds whose state is an algorithm.Small are the first numSmall.
func TestSmallKindsFirst(t *testing.T) {
	for k := range algorithm.NumKinds {
		if got, want := k.Small(), k < numSmall; got != want {
			t.Errorf("%v: Small() = %v, but it is below numSmall: %v", k, got, want)
		}
	}
}

// TestTableLastFound drives a table through random puts, deletions,
// sweeps and lookups of a few pairs, some sharing a hash, against a plain
// map: find's remembered position (last) goes stale whenever a deletion
// moves an entry, and must then miss, never answer for another pair.
func TestTableLastFound(t *testing.T) {
	hits := 0
	defer func() {
		if hits == 0 {
			t.Error("hot never found an entry")
		}
	}()
	refs := []ref{
		{hash: 7, mkey: mkey{"a", 1}},
		{hash: 7, mkey: mkey{"b", 1}}, // a's hash: in over while a is primary
		{hash: 7, mkey: mkey{"a", 2}},
		{hash: 8, mkey: mkey{"c", 1}},
		{hash: 9, mkey: mkey{"d", 1}},
		{hash: 0, mkey: mkey{"z", 1}}, // the zero lastHash of a new table
	}
	tb := newTable[tval]()
	want := map[mkey]tval{}
	seed := uint64(1)
	next := func(n int) int { // a small LCG: the test needs no quality
		seed = seed*6364136223846793005 + 1442695040888963407
		return int(seed>>33) % n
	}
	for step := range 20_000 {
		r := refs[next(len(refs))]
		switch op := next(10); {
		case op < 4:
			v := tval(step)
			if _, w := tb.find(r); w != absent {
				tb.set(r, v, w)
			} else {
				tb.put(r, v)
			}
			want[r.mkey] = v
		case op < 6:
			tb.del(r)
			delete(want, r.mkey)
		case op == 6:
			cut := tval(step - 50)
			tb.sweep(func(v tval) bool { return v < cut })
			for k, v := range want {
				if v < cut {
					delete(want, k)
				}
			}
		}
		for _, r := range refs {
			// hot, find's first step, before get moves last: an entry it
			// returns is r's, holding r's value.
			if e := tb.hot(r); e != nil {
				hits++
				if w, wok := want[r.mkey]; !wok || e.v != w || e.key != r.key || e.period != r.period {
					t.Fatalf("step %d: hot(%v) = %+v; want value %d, %v", step, r.mkey, *e, w, wok)
				}
			}
			got, ok := tb.get(r)
			if w, wok := want[r.mkey]; got != w || ok != wok {
				t.Fatalf("step %d: get(%v) = %d, %v; want %d, %v", step, r.mkey, got, ok, w, wok)
			}
		}
		if tb.len() != len(want) {
			t.Fatalf("step %d: len %d, want %d", step, tb.len(), len(want))
		}
	}
}
