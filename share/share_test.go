package share

import (
	"slices"
	"testing"
)

func TestSplit(t *testing.T) {
	t.Parallel()
	ps := func(dfs ...int64) []Party {
		var out []Party
		for i := 0; i+1 < len(dfs); i += 2 {
			out = append(out, Party{Demand: dfs[i], Floor: dfs[i+1]})
		}
		return out
	}
	tests := []struct {
		name    string
		limit   int64
		parties []Party
		policy  Policy
		want    []int64
	}{
		{"proportional doc example", 1000, ps(700, 50, 200, 50, 100, 50), Proportional, []int64{645, 220, 135}},
		{"proportional no floors", 1000, ps(700, 0, 200, 0, 100, 0), Proportional, []int64{700, 200, 100}},
		{"proportional rounding to earlier", 10, ps(1, 0, 1, 0, 1, 0), Proportional, []int64{4, 3, 3}},
		{"proportional largest remainder", 10, ps(2, 0, 1, 0), Proportional, []int64{7, 3}},
		{"proportional no demand is even", 9, ps(0, 0, 0, 0, 0, 0), Proportional, []int64{3, 3, 3}},
		{"proportional no demand over floors", 100, ps(0, 10, 0, 20), Proportional, []int64{45, 55}},
		{"floors above limit scale down", 10, ps(5, 10, 5, 10), Proportional, []int64{5, 5}},
		{"floors exactly the limit", 20, ps(100, 10, 0, 10), Proportional, []int64{10, 10}},
		{"floors uneven scale", 7, ps(0, 10, 0, 4), Proportional, []int64{5, 2}},
		{"negative inputs are zero", 10, ps(-5, -1, 5, -3), Proportional, []int64{0, 10}},
		{"zero limit", 0, ps(5, 5), Proportional, []int64{0}},
		{"negative limit", -3, ps(5, 5), Proportional, []int64{0}},
		{"no parties", 10, nil, Proportional, []int64{}},
		{"huge demand", 1 << 40, ps(1<<62, 0, 1<<62, 0), Proportional, []int64{1 << 39, 1 << 39}},
		{"unknown policy is proportional", 1000, ps(700, 0, 300, 0), Policy(42), []int64{700, 300}},
		{"maxmin all met", 1000, ps(700, 0, 200, 0, 100, 0), MaxMin, []int64{700, 200, 100}},
		{"maxmin overload", 1000, ps(900, 0, 600, 0, 100, 0), MaxMin, []int64{450, 450, 100}},
		{"maxmin leftover even", 1000, ps(100, 0, 100, 0), MaxMin, []int64{500, 500}},
		{"maxmin with floors", 100, ps(100, 10, 0, 10, 5, 10), MaxMin, []int64{80, 10, 10}},
		{"maxmin fewer units than parties", 2, ps(5, 0, 5, 0, 5, 0), MaxMin, []int64{1, 1, 0}},
		{"equal", 1000, ps(700, 50, 200, 50, 100, 50), Equal, []int64{334, 333, 333}},
		{"equal ignores floors", 10, ps(0, 100, 0, 0), Equal, []int64{5, 5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := Split(tt.limit, tt.parties, tt.policy)
			if !slices.Equal(got, tt.want) {
				t.Errorf("Split(%d, %v, %v) = %v, want %v", tt.limit, tt.parties, tt.policy, got, tt.want)
			}
			checkSplit(t, tt.limit, tt.parties, tt.policy, got)
		})
	}
}

// checkSplit checks the package doc's promises for one Split.
func checkSplit(t *testing.T, limit int64, parties []Party, p Policy, got []int64) {
	t.Helper()
	if len(got) != len(parties) {
		t.Fatalf("Split(%d, %v, %v) has %d shares for %d parties", limit, parties, p, len(got), len(parties))
	}
	var total, floors int64
	for i, s := range got {
		if s < 0 {
			t.Errorf("Split(%d, %v, %v): share %d is %d, negative", limit, parties, p, i, s)
		}
		total += s
		floors = satAdd(floors, max(0, parties[i].Floor))
	}
	if total > max(limit, 0) {
		t.Errorf("Split(%d, %v, %v) = %v: shares add up to %d, above the limit", limit, parties, p, got, total)
	}
	if limit > 0 && len(parties) > 0 && total != limit {
		t.Errorf("Split(%d, %v, %v) = %v: shares add up to %d, not the whole limit", limit, parties, p, got, total)
	}
	if p != Equal && floors <= limit {
		for i, s := range got {
			if f := parties[i].Floor; s < f {
				t.Errorf("Split(%d, %v, %v) = %v: share %d is %d, below its floor %d", limit, parties, p, got, i, s, f)
			}
		}
	}
}

func FuzzSplit(f *testing.F) {
	f.Add(int64(1000), int64(700), int64(50), int64(200), int64(50), int64(100), int64(50), uint8(0))
	f.Add(int64(10), int64(1), int64(10), int64(1), int64(10), int64(0), int64(0), uint8(1))
	f.Add(int64(1<<40), int64(1<<62), int64(0), int64(3), int64(1<<62), int64(-1), int64(7), uint8(2))
	f.Fuzz(func(t *testing.T, limit, d1, f1, d2, f2, d3, f3 int64, policy uint8) {
		parties := []Party{{d1, f1}, {d2, f2}, {d3, f3}}
		for n := 0; n <= len(parties); n++ {
			p := Policy(policy % 3)
			got := Split(limit, parties[:n], p)
			checkSplit(t, limit, parties[:n], p, got)
		}
	})
}

func BenchmarkSplit(b *testing.B) {
	parties := []Party{{700, 50}, {200, 50}, {100, 50}}
	for _, p := range []Policy{Proportional, MaxMin, Equal} {
		b.Run("policy="+p.String(), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				Split(1000, parties, p)
			}
		})
	}
}

func TestParsePolicy(t *testing.T) {
	t.Parallel()
	for _, p := range []Policy{Proportional, MaxMin, Equal} {
		if got, err := ParsePolicy(p.String()); err != nil || got != p {
			t.Errorf("ParsePolicy(%q) = %v, %v", p.String(), got, err)
		}
	}
	if _, err := ParsePolicy("fair"); err == nil {
		t.Error("ParsePolicy(fair) = nil error")
	}
}
