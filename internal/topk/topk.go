// Package topk finds the heaviest keys of a stream in bounded memory, with
// the Space-Saving algorithm (Metwally, Agrawal and El Abbadi, "Efficient
// Computation of Frequent and Top-k Elements in Data Streams", 2005).
//
// A Sketch of capacity k keeps at most k counters, whatever the number of
// distinct keys: the dashboard of `floodgate serve` counts denied keys
// with one, where a map per key would grow with every key a client
// invents. A key that is monitored adds its weight to its counter; a new
// key takes a free counter, or else the counter with the smallest count,
// which it inherits (the old key is forgotten, and the inherited count is
// the new key's possible overestimate, Err).
//
// # Error bound
//
// With N the total weight added and k the capacity, at every moment:
//
//   - each reported Item satisfies Count-Err <= true count <= Count, and
//     Err <= Bound() <= N/k: a count is never under, and over by at most
//     N/k;
//   - every key whose true count is above Bound() (so every key above
//     N/k) is monitored, so Top(k) lists it.
//
// 128 counters over 1,000,000 denials: every key denied more than 7,812
// times is listed, and no count is more than 7,812 too high. Bound is
// usually far below N/k on skewed traffic, where the heavy keys stay put
// and only the tail churns through the smallest counter. Merge combines
// sketches of one stream's successive time slices, with the sum of their
// bounds (at most the combined N over k); Union combines summaries of
// disjoint sets of keys (shards), with the largest of their bounds.
//
// A Sketch is not safe for concurrent use; its zero value is not usable:
// make one with New.
package topk

import (
	"cmp"
	"slices"
)

// Sketch is a Space-Saving summary of capacity k. V is a value kept with
// each monitored key, the one given to its latest Add (the dashboard keeps
// the key's last decision there).
type Sketch[V any] struct {
	k     int
	total int64
	// slots hold the monitored keys, at most k, and never move; heap is a
	// min-heap by count of the slots, each node holding its slot's count
	// (so that a sift reads one small array), and at[slot] is the slot's
	// index in heap; pos maps each key to its slot. A sift touches no map.
	slots []entry[V]
	heap  []node
	at    []int32
	pos   map[string]int32
}

type entry[V any] struct {
	key string
	err int64
	val V
}

// node is a counter of the heap: the count of slot.
type node struct {
	count int64
	slot  int32
}

// Item is one monitored key: its true count is between Count-Err and
// Count.
type Item[V any] struct {
	Key   string
	Count int64
	Err   int64
	Value V
}

// New returns an empty Sketch of k counters; k below 1 is taken as 1.
func New[V any](k int) *Sketch[V] {
	k = max(k, 1)
	return &Sketch[V]{k: k, slots: make([]entry[V], 0, k), heap: make([]node, 0, k), at: make([]int32, 0, k), pos: make(map[string]int32, k)}
}

// Cap is the sketch's number of counters, k.
func (s *Sketch[V]) Cap() int { return s.k }

// Len is the number of keys monitored, at most Cap.
func (s *Sketch[V]) Len() int { return len(s.slots) }

// Total is N, the sum of every weight added since New or Reset.
func (s *Sketch[V]) Total() int64 { return s.total }

// Bound is the most that the true count of a key not monitored can be,
// and the most that any Count is over: the smallest count once all k
// counters are taken (at most Total/k), 0 before.
func (s *Sketch[V]) Bound() int64 {
	if len(s.slots) < s.k {
		return 0
	}
	return s.heap[0].count
}

// Add adds weight w (a weight below 1 is ignored) to key and keeps v as
// its value.
func (s *Sketch[V]) Add(key string, w int64, v V) {
	if w < 1 {
		return
	}
	s.total += w
	if i, ok := s.pos[key]; ok {
		s.slots[i].val = v
		h := int(s.at[i])
		s.heap[h].count += w
		s.down(h)
		return
	}
	if len(s.slots) < s.k {
		i := int32(len(s.slots))
		s.slots = append(s.slots, entry[V]{key: key, val: v})
		s.heap = append(s.heap, node{count: w, slot: i})
		s.at = append(s.at, i)
		s.pos[key] = i
		s.up(int(i))
		return
	}
	// Take over the smallest counter: the new key may have been seen
	// before, as often as the evicted one at most.
	min := &s.heap[0]
	e := &s.slots[min.slot]
	delete(s.pos, e.key)
	*e = entry[V]{key: key, err: min.count, val: v}
	s.pos[key] = min.slot
	min.count += w
	s.down(0)
}

// Top returns the n monitored keys with the largest counts (all of them
// when n < 0 or n > Len), largest first, ties by key.
func (s *Sketch[V]) Top(n int) []Item[V] {
	items := make([]Item[V], len(s.slots))
	for i, e := range s.slots {
		items[i] = Item[V]{Key: e.key, Count: s.heap[s.at[i]].count, Err: e.err, Value: e.val}
	}
	sortItems(items)
	if n >= 0 && n < len(items) {
		items = items[:n]
	}
	return items
}

// Reset forgets every key and the total, keeping the capacity.
func (s *Sketch[V]) Reset() {
	clear(s.slots)
	s.slots = s.slots[:0]
	s.heap = s.heap[:0]
	s.at = s.at[:0]
	clear(s.pos)
	s.total = 0
}

func sortItems[V any](items []Item[V]) {
	slices.SortFunc(items, func(a, b Item[V]) int {
		if c := cmp.Compare(b.Count, a.Count); c != 0 {
			return c
		}
		return cmp.Compare(a.Key, b.Key)
	})
}

func (s *Sketch[V]) less(i, j int) bool { return s.heap[i].count < s.heap[j].count }

func (s *Sketch[V]) swap(i, j int) {
	s.heap[i], s.heap[j] = s.heap[j], s.heap[i]
	s.at[s.heap[i].slot] = int32(i)
	s.at[s.heap[j].slot] = int32(j)
}

func (s *Sketch[V]) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !s.less(i, p) {
			return
		}
		s.swap(i, p)
		i = p
	}
}

func (s *Sketch[V]) down(i int) {
	n := len(s.heap)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		c := l
		if r := l + 1; r < n && s.less(r, l) {
			c = r
		}
		if !s.less(c, i) {
			return
		}
		s.swap(i, c)
		i = c
	}
}

// Summary is the merge of several sketches: the keys any of them
// monitors, with counts that hold for the sum of their streams.
type Summary[V any] struct {
	// Items are the keys, largest Count first; each one's true count over
	// all the streams is between Count-Err and Count.
	Items []Item[V]
	// Total is the sum of the sketches' totals.
	Total int64
	// Bound is the sum of the sketches' bounds (at most Total/k for
	// sketches of k counters): no key missing from Items has a true count
	// above it, and no Err is above it.
	Bound int64
}

// Merge combines sketches, such as the counts of successive time slices,
// into one Summary of at most the sum of their capacities. A key that a
// sketch does not monitor may have had up to that sketch's Bound there, so
// its Count includes that bound and its Err too. The value kept is the one
// of the last sketch that monitors the key. Nil sketches are skipped.
func Merge[V any](sketches ...*Sketch[V]) Summary[V] {
	var sum Summary[V]
	at := map[string]int{}
	for _, s := range sketches {
		if s == nil {
			continue
		}
		b := s.Bound()
		seen := make(map[string]bool, len(s.slots))
		for slot, e := range s.slots {
			count := s.heap[s.at[slot]].count
			seen[e.key] = true
			if i, ok := at[e.key]; ok {
				it := &sum.Items[i]
				it.Count += count
				it.Err += e.err
				it.Value = e.val
				continue
			}
			// Absent from every earlier sketch: up to their bounds there.
			at[e.key] = len(sum.Items)
			sum.Items = append(sum.Items, Item[V]{Key: e.key, Count: count + sum.Bound, Err: e.err + sum.Bound, Value: e.val})
		}
		// The keys of earlier sketches that this one does not monitor.
		for i := range sum.Items {
			if !seen[sum.Items[i].Key] {
				sum.Items[i].Count += b
				sum.Items[i].Err += b
			}
		}
		sum.Total += s.total
		sum.Bound += b
	}
	sortItems(sum.Items)
	return sum
}

// Union combines summaries of disjoint streams of keys, such as the
// shards of a sketch split by a hash of the key: each key is in at most
// one of them, so each Count and Err holds as it is, and a key missing
// from every summary had at most the bound of its own, at most the
// largest Bound.
func Union[V any](summaries ...Summary[V]) Summary[V] {
	var u Summary[V]
	for _, s := range summaries {
		u.Items = append(u.Items, s.Items...)
		u.Total += s.Total
		u.Bound = max(u.Bound, s.Bound)
	}
	sortItems(u.Items)
	return u
}
