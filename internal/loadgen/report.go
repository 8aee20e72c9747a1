package loadgen

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"
)

// Summary is a Result in the form `floodgate bench -json` prints. Calls
// counts every call, Decisions those answered (OK or OVER_LIMIT), and
// DecisionsPerSec is Decisions over ElapsedSeconds; the histogram holds
// every call.
type Summary struct {
	Target          string        `json:"target,omitempty"`
	Callers         int           `json:"callers"`
	Rate            float64       `json:"rate,omitempty"`
	Keys            int           `json:"keys"`
	ElapsedSeconds  float64       `json:"elapsed_seconds"`
	Calls           int64         `json:"calls"`
	Decisions       int64         `json:"decisions"`
	DecisionsPerSec float64       `json:"decisions_per_second"`
	OK              int64         `json:"ok"`
	OverLimit       int64         `json:"over_limit"`
	Errors          int64         `json:"errors"`
	NoRule          int64         `json:"no_rule"`
	UnknownDomain   int64         `json:"unknown_domain"`
	StoreError      int64         `json:"store_error"`
	FirstError      string        `json:"first_error,omitempty"`
	LatencyMS       LatencyMS     `json:"latency_ms"`
	Histogram       []BucketCount `json:"histogram"`
}

// LatencyMS is the latency distribution in milliseconds.
type LatencyMS struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

// BucketCount is one bar of the latency chart: the calls whose latency was
// at most UpToMS milliseconds and above the previous bucket's bound.
type BucketCount struct {
	UpToMS float64 `json:"up_to_ms"`
	Count  int64   `json:"count"`
}

// Summarize condenses r; target and cfg describe the run.
func Summarize(r Result, target string, cfg Config) Summary {
	s := Summary{
		Target: target, Callers: cfg.Callers, Rate: cfg.Rate, Keys: cfg.Keys,
		ElapsedSeconds: r.Elapsed.Seconds(), Calls: r.Total(), Decisions: r.Decisions(), DecisionsPerSec: r.PerSecond(),
		OK: r.OK, OverLimit: r.OverLimit, Errors: r.Errors, NoRule: r.NoRule,
		UnknownDomain: r.UnknownDomain, StoreError: r.StoreError,
	}
	if r.FirstError != nil {
		s.FirstError = r.FirstError.Error()
	}
	if r.Hist != nil && r.Hist.TotalCount() > 0 {
		ms := func(ns int64) float64 { return float64(ns) / 1e6 }
		h := r.Hist
		s.LatencyMS = LatencyMS{
			P50: ms(h.ValueAtQuantile(50)), P90: ms(h.ValueAtQuantile(90)), P99: ms(h.ValueAtQuantile(99)),
			P999: ms(h.ValueAtQuantile(99.9)), Max: ms(h.Max()), Mean: h.Mean() / 1e6,
		}
		s.Histogram = buckets(r)
	}
	return s
}

// buckets splits the latencies at 1-2-5 steps (1µs, 2µs, 5µs, 10µs, ...)
// up to the maximum, without the empty buckets below the minimum. A
// latency goes in the first bucket whose bound is at least its value
// (within the histogram's 3 significant digits).
func buckets(r Result) []BucketCount {
	h := r.Hist
	var out []BucketCount
	var bounds []int64
	for b := int64(time.Microsecond); len(bounds) == 0 || bounds[len(bounds)-1] < h.Max(); b *= 10 {
		for _, m := range []int64{1, 2, 5} {
			if len(bounds) == 0 || bounds[len(bounds)-1] < h.Max() {
				bounds = append(bounds, b*m)
			}
		}
	}
	out = make([]BucketCount, len(bounds))
	for i, b := range bounds {
		out[i].UpToMS = float64(b) / 1e6
	}
	i := 0
	for _, bar := range h.Distribution() {
		if bar.Count == 0 {
			continue
		}
		for i < len(bounds)-1 && bounds[i] < bar.From {
			i++
		}
		out[i].Count += bar.Count
	}
	for len(out) > 1 && out[0].Count == 0 {
		out = out[1:]
	}
	return out
}

// WriteJSON writes s as one JSON object.
func (s Summary) WriteJSON(w io.Writer) error {
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	return e.Encode(s)
}

// WriteText writes s for a person: rate, outcomes, latency quantiles and
// an ASCII chart of the latency histogram.
func (s Summary) WriteText(w io.Writer) {
	if s.Target != "" {
		fmt.Fprintf(w, "target      %s\n", s.Target)
	}
	load := "closed loop (each caller sends when its last call returns)"
	if s.Rate > 0 {
		load = fmt.Sprintf("open loop at %g/s (latency from each call's scheduled time)", s.Rate)
	}
	keys := fmt.Sprintf("%d uniform keys", s.Keys)
	if s.Keys == 1 {
		keys = "one hot key"
	}
	fmt.Fprintf(w, "load        %d callers, %s, %s\n", s.Callers, keys, load)
	fmt.Fprintf(w, "calls       %d in %.2fs; decisions (OK or OVER_LIMIT) %.0f/s\n", s.Calls, s.ElapsedSeconds, s.DecisionsPerSec)
	pct := func(n int64) float64 {
		if s.Calls == 0 {
			return 0
		}
		return 100 * float64(n) / float64(s.Calls)
	}
	fmt.Fprintf(w, "outcomes    OK %d (%.1f%%), OVER_LIMIT %d (%.1f%%), errors %d (%.1f%%)\n",
		s.OK, pct(s.OK), s.OverLimit, pct(s.OverLimit), s.Errors, pct(s.Errors))
	if s.StoreError > 0 {
		fmt.Fprintf(w, "store       unreachable: the failure policy answered %d calls (%.1f%%), not the limits (the service's store failed or timed out): check its store (-redis) and its log\n", s.StoreError, pct(s.StoreError))
	}
	if s.UnknownDomain > 0 {
		fmt.Fprintf(w, "no rule     %d OK answers (%.1f%%) were of a domain the service's config does not have: check -domain\n", s.UnknownDomain, pct(s.UnknownDomain))
	}
	if n := s.NoRule - s.UnknownDomain; n > 0 {
		fmt.Fprintf(w, "no rule     %d OK answers (%.1f%%) had no limit (no rule matched, or an unlimited one): check -descriptor and the config\n", n, pct(n))
	}
	if s.FirstError != "" {
		fmt.Fprintf(w, "first error %s\n", s.FirstError)
	}
	if len(s.Histogram) == 0 {
		return
	}
	l := s.LatencyMS
	fmt.Fprintf(w, "latency     p50 %s  p90 %s  p99 %s  p99.9 %s  max %s  mean %s\n",
		FormatMS(l.P50), FormatMS(l.P90), FormatMS(l.P99), FormatMS(l.P999), FormatMS(l.Max), FormatMS(l.Mean))
	var most int64
	for _, b := range s.Histogram {
		most = max(most, b.Count)
	}
	const width = 40
	for _, b := range s.Histogram {
		n := int(math.Round(width * float64(b.Count) / float64(most)))
		if n == 0 && b.Count > 0 {
			n = 1
		}
		fmt.Fprintf(w, "  <= %9s |%-*s| %6.2f%%  %d\n", FormatMS(b.UpToMS), width, strings.Repeat("#", n), pct(b.Count), b.Count)
	}
}

// Warnings are the lines a report's reader must not miss, for stderr:
// answers the failure policy gave instead of the limits, and a domain the
// service does not have.
func (s Summary) Warnings() []string {
	var out []string
	if s.StoreError > 0 {
		out = append(out, fmt.Sprintf("warning: store unreachable: the failure policy answered %.1f%% of the calls; these figures are not the limits' decisions", 100*float64(s.StoreError)/float64(max(s.Calls, 1))))
	}
	if s.UnknownDomain > 0 {
		out = append(out, fmt.Sprintf("warning: unknown domain: the service has no domain of that name in its config; %.1f%% of the calls matched no rule", 100*float64(s.UnknownDomain)/float64(max(s.Calls, 1))))
	}
	return out
}

// FormatMS prints a latency given in milliseconds with a unit that keeps
// three significant digits readable.
func FormatMS(ms float64) string {
	switch {
	case ms < 1:
		return fmt.Sprintf("%.3gµs", ms*1000)
	case ms < 1000:
		return fmt.Sprintf("%.3gms", ms)
	}
	return fmt.Sprintf("%.3gs", ms/1000)
}

// Progress prints a Snapshot once per call: on a terminal it rewrites one
// line in place, elsewhere it writes one line per call.
type Progress struct {
	w        io.Writer
	terminal bool
	wrote    bool
}

// NewProgress writes to w; it rewrites lines in place when w is a terminal.
func NewProgress(w io.Writer) *Progress {
	return &Progress{w: w, terminal: IsTerminal(w)}
}

// IsTerminal reports whether w is a character device (a terminal).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// Update prints s.
func (p *Progress) Update(s Snapshot) {
	line := fmt.Sprintf("%6.1fs  %9.0f decisions/s  OK %d  OVER_LIMIT %d  errors %d  p99 %s",
		s.Elapsed.Seconds(), s.PerSecond(), s.OK, s.OverLimit, s.Errors, FormatMS(float64(s.P99)/1e6))
	if p.terminal {
		// Carriage return, the line, then erase what a longer line left.
		fmt.Fprintf(p.w, "\r%s\x1b[K", line)
		p.wrote = true
		return
	}
	fmt.Fprintln(p.w, line)
}

// Done ends a line rewritten in place.
func (p *Progress) Done() {
	if p.wrote {
		fmt.Fprintln(p.w)
		p.wrote = false
	}
}
