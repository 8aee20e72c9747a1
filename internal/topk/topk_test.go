package topk

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// step is one Add of a table case.
type step struct {
	key string
	w   int64
}

func run(s *Sketch[int], steps []step) map[string]int64 {
	exact := map[string]int64{}
	for i, st := range steps {
		s.Add(st.key, st.w, i)
		if st.w > 0 {
			exact[st.key] += st.w
		}
	}
	return exact
}

func TestSketch(t *testing.T) {
	for _, tc := range []struct {
		name  string
		k     int
		steps []step
		want  []Item[int] // Top(-1)
		bound int64
	}{
		{name: "empty", k: 2, want: []Item[int]{}},
		{name: "under capacity is exact", k: 3,
			steps: []step{{"a", 1}, {"b", 2}, {"a", 1}},
			want:  []Item[int]{{Key: "a", Count: 2, Value: 2}, {Key: "b", Count: 2, Value: 1}}},
		{name: "weights below 1 are ignored", k: 2,
			steps: []step{{"a", 0}, {"a", -5}, {"b", 1}},
			want:  []Item[int]{{Key: "b", Count: 1, Value: 2}}},
		{name: "a new key takes the smallest counter", k: 2,
			steps: []step{{"a", 5}, {"b", 2}, {"c", 1}},
			// c inherits b's 2: count 3, of which 2 may be b's.
			want:  []Item[int]{{Key: "a", Count: 5, Value: 0}, {Key: "c", Count: 3, Err: 2, Value: 2}},
			bound: 3},
		{name: "an evicted key comes back with the bound", k: 2,
			steps: []step{{"a", 5}, {"b", 2}, {"c", 1}, {"b", 1}},
			want:  []Item[int]{{Key: "a", Count: 5, Value: 0}, {Key: "b", Count: 4, Err: 3, Value: 3}},
			bound: 4},
		{name: "capacity 1 keeps the last key with everything", k: 1,
			steps: []step{{"a", 3}, {"b", 1}},
			want:  []Item[int]{{Key: "b", Count: 4, Err: 3, Value: 1}},
			bound: 4},
		{name: "k below 1 is 1", k: 0,
			steps: []step{{"a", 1}},
			want:  []Item[int]{{Key: "a", Count: 1, Value: 0}},
			bound: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := New[int](tc.k)
			run(s, tc.steps)
			got := s.Top(-1)
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("Top(-1) = %v, want %v", got, tc.want)
			}
			if got, want := s.Bound(), tc.bound; got != want {
				t.Errorf("Bound() = %d, want %d", got, want)
			}
		})
	}
}

func TestTopN(t *testing.T) {
	s := New[int](4)
	run(s, []step{{"a", 1}, {"b", 3}, {"c", 2}, {"d", 3}})
	if got, want := fmt.Sprint(s.Top(2)), fmt.Sprint([]Item[int]{{Key: "b", Count: 3, Value: 1}, {Key: "d", Count: 3, Value: 3}}); got != want {
		t.Errorf("Top(2) = %s, want %s", got, want)
	}
	if got := len(s.Top(10)); got != 4 {
		t.Errorf("len(Top(10)) = %d, want 4", got)
	}
	s.Reset()
	if s.Len() != 0 || s.Total() != 0 || s.Bound() != 0 {
		t.Errorf("after Reset: Len %d, Total %d, Bound %d", s.Len(), s.Total(), s.Bound())
	}
	run(s, []step{{"x", 1}})
	if got := s.Top(-1); len(got) != 1 || got[0].Key != "x" {
		t.Errorf("after Reset and Add: %v", got)
	}
}

// checkBounds checks the guarantees of the package doc of s against the
// exact counts of its stream.
func checkBounds(t *testing.T, s *Sketch[int], exact map[string]int64) {
	t.Helper()
	var n int64
	for _, c := range exact {
		n += c
	}
	if s.Total() != n {
		t.Fatalf("Total() = %d, want %d", s.Total(), n)
	}
	k := int64(s.Cap())
	bound := s.Bound()
	if bound*k > n {
		t.Fatalf("Bound() = %d is above N/k = %d/%d", bound, n, k)
	}
	if s.Len() > s.Cap() || len(s.pos) != s.Len() || len(s.heap) != s.Len() {
		t.Fatalf("%d keys monitored (%d indexed, %d in the heap), capacity %d", s.Len(), len(s.pos), len(s.heap), s.Cap())
	}
	for h, n := range s.heap {
		if i := n.slot; int(s.at[i]) != h || s.pos[s.slots[i].key] != i {
			t.Fatalf("slot %d: at %d, heap index %d, pos %d", i, s.at[i], h, s.pos[s.slots[i].key])
		}
		if h > 0 && s.less(h, (h-1)/2) {
			t.Fatalf("heap order broken at %d", h)
		}
	}
	listed := map[string]Item[int]{}
	var sum int64
	for _, it := range s.Top(-1) {
		listed[it.Key] = it
		sum += it.Count
		truth := exact[it.Key]
		if it.Count-it.Err > truth || truth > it.Count {
			t.Fatalf("%s: count %d, err %d, but the true count is %d", it.Key, it.Count, it.Err, truth)
		}
		if it.Err > bound {
			t.Fatalf("%s: err %d above Bound() %d", it.Key, it.Err, bound)
		}
	}
	if s.Len() == s.Cap() && sum != n {
		t.Fatalf("a full sketch's counts sum to %d, want N = %d", sum, n)
	}
	for key, c := range exact {
		if _, ok := listed[key]; !ok && (c > bound || c*k > n) {
			t.Fatalf("%s: true count %d (N/k = %d/%d, Bound %d) is not listed", key, c, n, k, bound)
		}
	}
}

// stream is a random stream of a skewed key distribution: a few heavy
// keys and a long tail.
func stream(r *rand.Rand, length, keys int, maxWeight int64) []step {
	z := rand.NewZipf(r, 1.2, 1, uint64(keys-1))
	out := make([]step, length)
	for i := range out {
		out[i] = step{key: fmt.Sprintf("k%d", z.Uint64()), w: 1 + r.Int64N(maxWeight)}
	}
	return out
}

// TestBoundsProperty checks the error bound on random streams of many
// sizes, skewed and uniform, unit and weighted.
func TestBoundsProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 300 {
		k := 1 + r.IntN(40)
		keys := 2 + r.IntN(400)
		var steps []step
		if trial%3 == 0 {
			for range r.IntN(3000) {
				steps = append(steps, step{key: fmt.Sprintf("u%d", r.IntN(keys)), w: 1})
			}
		} else {
			steps = stream(r, r.IntN(3000), keys, 1+int64(trial%4)*5)
		}
		s := New[int](k)
		exact := map[string]int64{}
		for i, st := range steps {
			s.Add(st.key, st.w, i)
			exact[st.key] += st.w
			if i%97 == 0 {
				checkBounds(t, s, exact)
			}
		}
		checkBounds(t, s, exact)
	}
}

// TestMergeProperty checks Merge's bound on random pairs and triples of
// sketches over disjoint time slices of one stream.
func TestMergeProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 200 {
		k := 1 + r.IntN(20)
		parts := 1 + r.IntN(3)
		exact := map[string]int64{}
		var sketches []*Sketch[int]
		var n int64
		for p := range parts {
			s := New[int](k)
			for i, st := range stream(r, r.IntN(2000), 2+r.IntN(200), 3) {
				s.Add(st.key, st.w, p*10000+i)
				exact[st.key] += st.w
				n += st.w
			}
			sketches = append(sketches, s, nil)
		}
		sum := Merge(sketches...)
		if sum.Total != n {
			t.Fatalf("Total %d, want %d", sum.Total, n)
		}
		if sum.Bound*int64(k) > n {
			t.Fatalf("Bound %d above N/k = %d/%d", sum.Bound, n, k)
		}
		listed := map[string]bool{}
		for i, it := range sum.Items {
			listed[it.Key] = true
			if truth := exact[it.Key]; it.Count-it.Err > truth || truth > it.Count || it.Err > sum.Bound {
				t.Fatalf("%s: count %d err %d, true %d, bound %d", it.Key, it.Count, it.Err, truth, sum.Bound)
			}
			if i > 0 && sum.Items[i-1].Count < it.Count {
				t.Fatalf("items out of order at %d", i)
			}
		}
		for key, c := range exact {
			if !listed[key] && c > sum.Bound {
				t.Fatalf("%s: true count %d above the bound %d, not listed", key, c, sum.Bound)
			}
		}
	}
}

// TestUnionProperty checks Union's bound on sketches of a stream split
// by key into shards, each sketch of k counters: the bound of the whole
// is at most N/k.
func TestUnionProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 200 {
		k := 1 + r.IntN(10)
		shards := 1 + r.IntN(8)
		sk := make([]*Sketch[int], shards)
		for i := range sk {
			sk[i] = New[int](k)
		}
		exact := map[string]int64{}
		var n int64
		for i, st := range stream(r, r.IntN(3000), 2+r.IntN(300), 4) {
			var h int
			for _, c := range st.key {
				h = h*31 + int(c)
			}
			sk[h%shards].Add(st.key, st.w, i)
			exact[st.key] += st.w
			n += st.w
		}
		var sums []Summary[int]
		for _, s := range sk {
			sums = append(sums, Merge(s))
		}
		u := Union(sums...)
		if u.Total != n || u.Bound*int64(k) > n {
			t.Fatalf("total %d (want %d), bound %d above N/k = %d/%d", u.Total, n, u.Bound, n, k)
		}
		listed := map[string]bool{}
		for i, it := range u.Items {
			listed[it.Key] = true
			if truth := exact[it.Key]; it.Count-it.Err > truth || truth > it.Count || it.Err > u.Bound {
				t.Fatalf("%s: count %d err %d, true %d, bound %d", it.Key, it.Count, it.Err, truth, u.Bound)
			}
			if i > 0 && u.Items[i-1].Count < it.Count {
				t.Fatalf("items out of order at %d", i)
			}
		}
		for key, c := range exact {
			if !listed[key] && c > u.Bound {
				t.Fatalf("%s: true count %d above the bound %d, not listed", key, c, u.Bound)
			}
		}
	}
}

func TestMergeValues(t *testing.T) {
	a, b := New[string](2), New[string](2)
	a.Add("x", 3, "old")
	a.Add("y", 1, "y")
	b.Add("x", 1, "new")
	sum := Merge(a, b)
	// a is full, so a key it lacks may have had up to 1 there (none
	// does); b is not, so its bound is 0 and y's count stays exact.
	want := []Item[string]{{Key: "x", Count: 4, Value: "new"}, {Key: "y", Count: 1, Value: "y"}}
	if fmt.Sprint(sum.Items) != fmt.Sprint(want) || sum.Total != 5 || sum.Bound != 1 {
		t.Errorf("Merge = %+v, want items %v, total 5, bound 1", sum, want)
	}
}

func FuzzSketch(f *testing.F) {
	f.Add(uint8(2), []byte("aabacadaeaf"))
	f.Add(uint8(1), []byte("xyzxyzxxxx"))
	f.Add(uint8(5), []byte{0, 1, 2, 3, 4, 5, 6, 7, 0, 0, 0, 200, 201})
	f.Fuzz(func(t *testing.T, k uint8, data []byte) {
		s := New[int](int(k % 17))
		exact := map[string]int64{}
		// Each byte is a key of 16 and a weight of 1 to 16.
		for i, c := range data {
			key, w := string(rune('a'+c%16)), int64(c/16)+1
			s.Add(key, w, i)
			exact[key] += w
		}
		checkBounds(t, s, exact)
		half := New[int](s.Cap())
		for i, c := range data[len(data)/2:] {
			half.Add(string(rune('a'+c%16)), int64(c/16)+1, i)
		}
		if sum := Merge(s, half); sum.Total != s.Total()+half.Total() || sum.Bound != s.Bound()+half.Bound() {
			t.Fatalf("Merge: total %d bound %d", sum.Total, sum.Bound)
		}
	})
}

func BenchmarkAdd(b *testing.B) {
	for _, keys := range []int{10, 100_000} {
		b.Run(fmt.Sprintf("k=128/keys=%d", keys), func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, 1))
			steps := stream(r, 1<<16, keys, 1)
			s := New[int](128)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				st := steps[i&(len(steps)-1)]
				s.Add(st.key, 1, i)
				i++
			}
		})
	}
}
