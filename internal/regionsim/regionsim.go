// Package regionsim simulates one global limit across three regions on one
// machine, with real Redis processes and injected network latency, and
// compares three ways of keeping it: a central counter (every decision
// goes to home), a static split (each region decides limit ÷ regions in its
// own Redis) and granted shares (package region). Run drives one
// configuration; the tests of this package run it shortened in CI, and in
// full for docs/regions.md:
//
//	go test -count=1 -run '^TestRegionsSim$' ./internal/regionsim -full -v
//
// Each region reaches home through a faults.Proxy that adds twice the
// region's one-way latency to every round trip (the proxy delays what the
// client sends); a region's own Redis is reached directly. A partition
// makes one region's proxy hold everything for an hour, and then drops
// what it held.
package regionsim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/grant"
	"github.com/floodgate-rl/floodgate/internal/faults"
	"github.com/floodgate-rl/floodgate/region"
	"github.com/floodgate-rl/floodgate/share"
	"github.com/floodgate-rl/floodgate/store/redisstore"
)

// Mode is a way of keeping one global limit.
type Mode string

// The modes compared.
const (
	Central Mode = "central" // every decision in the home Redis
	Static  Mode = "static"  // limit ÷ regions in each region's Redis
	Granted Mode = "granted" // package region: shares granted by home (package grant)
)

// Region is one simulated region.
type Region struct {
	Name   string
	OneWay time.Duration // one-way latency to home
	Addr   string        // the region's own Redis
}

// Config is one run. The zero value of a field means its default.
type Config struct {
	Regions []Region
	Home    string // the home Redis, host:port
	// Limit per Period: 1000 per second.
	Limit  int64
	Period time.Duration
	// Demand is the requests per second of all regions together: 1.5×
	// Limit by default, so the limit binds.
	Demand float64
	// Duration of each mode's run: 60 s.
	Duration time.Duration
	// From and To are the regions' parts of the demand before and after
	// the shift (70/20/10 to 10/20/70), which moves linearly through the
	// middle third of the run.
	From, To []float64
	// Step makes the shift a step at a third of the run instead of a
	// ramp, to time how long the shares take to follow it.
	Step bool
	// Partition, if above zero, makes home unreachable from region
	// PartitionRegion for that long, from PartitionAt (a third of the run).
	Partition       time.Duration
	PartitionAt     time.Duration
	PartitionRegion int
	// Options of the granted regions (Name is set per region); the run's
	// defaults are Term 5 s, Rebalance 250 ms, Floor 0.02, SafeShare 0.
	Options region.Options
	// Timeout of every Limiter: 1 s, above the longest round trip to home.
	Timeout time.Duration
	Modes   []Mode
	// Seed makes the keys of a run its own.
	Seed string
}

func (c *Config) defaults() {
	c.Limit = cmp.Or(c.Limit, 1000)
	c.Period = cmp.Or(c.Period, time.Second)
	c.Demand = cmp.Or(c.Demand, 1.5*float64(c.Limit))
	c.Duration = cmp.Or(c.Duration, time.Minute)
	if len(c.From) == 0 {
		c.From, c.To = []float64{0.7, 0.2, 0.1}, []float64{0.1, 0.2, 0.7}
	}
	if c.Partition > 0 && c.PartitionAt == 0 {
		c.PartitionAt = c.Duration / 3
	}
	c.Options.Term = cmp.Or(c.Options.Term, 5*time.Second)
	c.Options.Rebalance = cmp.Or(c.Options.Rebalance, 250*time.Millisecond)
	c.Options.Floor = cmp.Or(c.Options.Floor, 0.02)
	c.Options.Timeout = cmp.Or(c.Options.Timeout, time.Second)
	c.Timeout = cmp.Or(c.Timeout, time.Second)
	if len(c.Modes) == 0 {
		c.Modes = []Mode{Central, Static, Granted}
	}
}

// weights are the regions' parts of the demand at offset t of a run.
func (c *Config) weights(t time.Duration) []float64 {
	f := (float64(t) - float64(c.Duration)/3) / (float64(c.Duration) / 3)
	f = min(1, max(0, f))
	if c.Step && t >= c.Duration/3 {
		f = 1
	}
	w := make([]float64, len(c.From))
	for i := range w {
		w[i] = c.From[i] + (c.To[i]-c.From[i])*f
	}
	return w
}

// Report is what Run measured, one ModeReport per mode.
type Report struct {
	Limit     int64   `json:"limit"`
	PeriodMS  int64   `json:"period_ms"`
	Demand    float64 `json:"demand_per_s"`
	Duration  string  `json:"duration"`
	Partition string  `json:"partition,omitempty"`
	// Bound is the partition bound of the granted mode per window:
	// Limit + ⌊SafeShare × Limit⌋ for the one region cut off.
	Bound int64        `json:"bound"`
	Modes []ModeReport `json:"modes"`
}

// ModeReport is one mode's run.
type ModeReport struct {
	Mode     Mode  `json:"mode"`
	Asked    int64 `json:"asked"`
	Admitted int64 `json:"admitted"`
	Errors   int64 `json:"errors"`
	// Windows counted: every whole window of the run.
	Windows int `json:"windows"`
	// Capacity is Σ over windows of min(demand, Limit): what a perfect
	// limiter would admit.
	Capacity int64 `json:"capacity"`
	// Overrun is Σ over windows of the units admitted above Limit;
	// MaxWindow the most admitted in one window; WindowsOver how many
	// windows were above Limit.
	Overrun     int64 `json:"overrun"`
	MaxWindow   int64 `json:"max_window"`
	WindowsOver int   `json:"windows_over"`
	// InWindows is what was admitted in the counted windows;
	// Utilisation is InWindows ÷ Capacity.
	InWindows   int64          `json:"in_windows"`
	Utilisation float64        `json:"utilisation"`
	Regions     []RegionReport `json:"regions"`
	// FollowMS (granted): how far the shares lag the shifting demand (see
	// follow), or with Config.Step how long after the step they are all
	// within 5% of the limit of their new targets; -1 if more than 10 s.
	FollowMS float64 `json:"follow_ms"`
	// HomeCalls and HomeFailures (granted): calls to home, all regions.
	HomeCalls    int64 `json:"home_calls,omitempty"`
	HomeFailures int64 `json:"home_failures,omitempty"`
}

// RegionReport is one region's part of a mode's run.
type RegionReport struct {
	Name     string  `json:"name"`
	Asked    int64   `json:"asked"`
	Admitted int64   `json:"admitted"`
	Errors   int64   `json:"errors"`
	P50MS    float64 `json:"p50_ms"`
	P99MS    float64 `json:"p99_ms"`
}

// Run runs every mode of c, one after the other, and reports each.
func Run(ctx context.Context, c Config) (Report, error) {
	c.defaults()
	if len(c.Regions) != len(c.From) || len(c.From) != len(c.To) {
		return Report{}, fmt.Errorf("regionsim: %d regions, %d and %d weights", len(c.Regions), len(c.From), len(c.To))
	}
	rep := Report{Limit: c.Limit, PeriodMS: c.Period.Milliseconds(), Demand: c.Demand, Duration: c.Duration.String(),
		Bound: c.Limit + int64(float64(c.Limit)*c.Options.SafeShare)}
	if c.Partition > 0 {
		rep.Partition = fmt.Sprintf("home unreachable from %s for %v from %v", c.Regions[c.PartitionRegion].Name, c.Partition, c.PartitionAt)
	}
	for _, m := range c.Modes {
		mr, err := runMode(ctx, c, m)
		if err != nil {
			return rep, fmt.Errorf("regionsim: %s: %w", m, err)
		}
		rep.Modes = append(rep.Modes, mr)
	}
	return rep, nil
}

// sample is one decision.
type sample struct {
	region  int
	sentWin int64 // window of the send time (demand)
	win     int64 // window of the decision (admitted)
	allowed bool
	err     bool
	latency time.Duration
}

// heldSample is the granted regions' shares at one moment.
type heldSample struct {
	at     time.Duration
	shares []int64
}

func runMode(ctx context.Context, c Config, m Mode) (ModeReport, error) {
	n := len(c.Regions)
	proxies := make([]*faults.Proxy, n)
	for i, r := range c.Regions {
		p, err := faults.NewProxy(c.Home)
		if err != nil {
			return ModeReport{}, err
		}
		defer p.Close()
		p.SetLatency(2 * r.OneWay)
		proxies[i] = p
	}
	key := fmt.Sprintf("sim:%s:%s", c.Seed, m)
	limit := floodgate.Limit{Limit: c.Limit, Period: c.Period}
	lims := make([]*floodgate.Limiter, n)
	granted := make([]*region.Store, n)
	var closers []func()
	defer func() {
		for _, f := range slices.Backward(closers) {
			f()
		}
	}()
	openCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for i, r := range c.Regions {
		var store floodgate.Store
		switch m {
		case Central:
			// Every call its own script run, pipelined by the client: with
			// coalescing (two runs in flight, the others waiting to share
			// the next, or until 128 wait) a call would also wait up to a
			// round trip of 300 ms for a run, which would measure the
			// coalescer, not the central counter.
			s, err := redisstore.Open(openCtx, "redis://"+proxies[i].Addr(), &redisstore.Options{Coalesce: -1})
			if err != nil {
				return ModeReport{}, err
			}
			closers = append(closers, func() { s.Close() })
			store = s
		case Static:
			s, err := redisstore.Open(openCtx, "redis://"+r.Addr, nil)
			if err != nil {
				return ModeReport{}, err
			}
			closers = append(closers, func() { s.Close() })
			store = s
		case Granted:
			s, err := redisstore.Open(openCtx, "redis://"+r.Addr, nil)
			if err != nil {
				return ModeReport{}, err
			}
			closers = append(closers, func() { s.Close() })
			home, err := grant.OpenHome(openCtx, "redis://"+proxies[i].Addr())
			if err != nil {
				return ModeReport{}, err
			}
			closers = append(closers, func() { home.Close() })
			o := c.Options
			o.Name = r.Name
			rs, err := region.New(s, home, &o)
			if err != nil {
				return ModeReport{}, err
			}
			closers = append(closers, func() { rs.Close() })
			granted[i] = rs
			store = rs
		}
		lim, err := floodgate.New(store, &floodgate.Options{Timeout: c.Timeout, FailurePolicy: floodgate.FailClosed})
		if err != nil {
			return ModeReport{}, err
		}
		lims[i] = lim
	}
	regionLimit := func(int) floodgate.Limit { return limit }
	switch m {
	case Static:
		split := share.Split(c.Limit, make([]share.Party, n), share.Equal)
		regionLimit = func(i int) floodgate.Limit { l := limit; l.Limit = split[i]; return l }
	case Granted:
		regionLimit = func(int) floodgate.Limit { l := limit; l.Global = true; return l }
	}

	// One decision per region before the load, as in a service that has
	// been running: the client connects, and a granted region takes the
	// key's first grant, which the first decision waits for.
	// It is set-up, not measured: on a loaded machine a first grant across
	// the simulated distance can take longer than a Limiter's Timeout, so
	// a warm-up that passes its deadline is tried again, for up to 30 s.
	for i := range c.Regions {
		for until := time.Now().Add(30 * time.Second); ; {
			_, err := lims[i].Peek(ctx, key, regionLimit(i))
			if err == nil {
				break
			}
			if !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil || time.Now().After(until) {
				return ModeReport{}, fmt.Errorf("warm-up of %s: %w", c.Regions[i].Name, err)
			}
		}
	}

	// The load: open loop, each region's arrivals at its part of Demand,
	// one goroutine per request (at most 5000 in flight; more are counted
	// as errors).
	var (
		mu      sync.Mutex
		samples []sample
		held    []heldSample
		wg      sync.WaitGroup
	)
	inflight := make(chan struct{}, 5000)
	var dropped atomic.Int64
	start := time.Now()
	end := start.Add(c.Duration)
	period := c.Period.Microseconds()
	win := func(t time.Time) int64 { return t.UnixMicro() / period }
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	for i := range c.Regions {
		wg.Go(func() {
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			var carry float64
			last := start
			for {
				select {
				case <-runCtx.Done():
					return
				case now := <-tick.C:
					if !now.Before(end) {
						return
					}
					w := c.weights(now.Sub(start))
					carry += c.Demand * w[i] * now.Sub(last).Seconds()
					last = now
					for ; carry >= 1; carry-- {
						select {
						case inflight <- struct{}{}:
						default:
							dropped.Add(1)
							continue
						}
						wg.Go(func() {
							defer func() { <-inflight }()
							t0 := time.Now()
							d, err := lims[i].Allow(runCtx, key, regionLimit(i))
							lat := time.Since(t0)
							at := d.Now
							if at.IsZero() {
								at = t0
							}
							mu.Lock()
							samples = append(samples, sample{region: i, sentWin: win(t0), win: win(at), allowed: d.Allowed && err == nil, err: err != nil, latency: lat})
							mu.Unlock()
						})
					}
				}
			}
		})
	}
	// The partition, and the granted shares every 100 ms.
	wg.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		cut, healed := false, false
		for {
			select {
			case <-runCtx.Done():
				return
			case now := <-tick.C:
				at := now.Sub(start)
				if !now.Before(end) {
					return
				}
				if c.Partition > 0 && !cut && at >= c.PartitionAt {
					proxies[c.PartitionRegion].SetLatency(time.Hour)
					cut = true
				}
				if cut && !healed && at >= c.PartitionAt+c.Partition {
					p := proxies[c.PartitionRegion]
					p.SetLatency(2 * c.Regions[c.PartitionRegion].OneWay)
					p.Reset()
					healed = true
				}
				if m == Granted {
					h := heldSample{at: at}
					for _, rs := range granted {
						h.shares = append(h.shares, rs.Held(key, regionLimit(0)).Share)
					}
					mu.Lock()
					held = append(held, h)
					mu.Unlock()
				}
			}
		}
	})
	wg.Wait()

	mr := ModeReport{Mode: m, Errors: dropped.Load()}
	first, lastWin := win(start)+1, win(end)-1 // whole windows only
	asked := map[int64]int64{}
	admitted := map[int64]int64{}
	regs := make([]RegionReport, len(c.Regions))
	lats := make([][]time.Duration, len(c.Regions))
	for _, s := range samples {
		rr := &regs[s.region]
		rr.Asked++
		mr.Asked++
		lats[s.region] = append(lats[s.region], s.latency)
		if s.err {
			rr.Errors++
			mr.Errors++
		}
		if s.allowed {
			rr.Admitted++
			mr.Admitted++
		}
		if s.sentWin >= first && s.sentWin <= lastWin {
			asked[s.sentWin]++
		}
		if s.allowed && s.win >= first && s.win <= lastWin {
			admitted[s.win]++
		}
	}
	var inWindows int64
	for w := first; w <= lastWin; w++ {
		mr.Windows++
		mr.Capacity += min(asked[w], c.Limit)
		a := admitted[w]
		inWindows += a
		mr.MaxWindow = max(mr.MaxWindow, a)
		if a > c.Limit {
			mr.Overrun += a - c.Limit
			mr.WindowsOver++
		}
	}
	mr.InWindows = inWindows
	if mr.Capacity > 0 {
		mr.Utilisation = float64(inWindows) / float64(mr.Capacity)
	}
	for i := range regs {
		regs[i].Name = c.Regions[i].Name
		regs[i].P50MS = quantileMS(lats[i], 0.50)
		regs[i].P99MS = quantileMS(lats[i], 0.99)
	}
	mr.Regions = regs
	mr.FollowMS = -1
	if m == Granted {
		mr.FollowMS = follow(c, held)
		for _, rs := range granted {
			st := rs.Stats()
			mr.HomeCalls += st.Calls
			mr.HomeFailures += st.Failures
		}
	}
	return mr, nil
}

// follow is how far behind the demand the granted shares are: the least
// lag (in steps of 100 ms, up to 10 s) such that at every sample from the
// start of the shift to two seconds after its end, every region's share is
// within 5% of the limit of its target as of lag earlier (the policy's
// split of the true demand then, with the run's floor). -1 if none is.
func follow(c Config, held []heldSample) float64 {
	target := func(t time.Duration) []int64 {
		w := c.weights(t)
		parties := make([]share.Party, len(w))
		for i := range w {
			parties[i] = share.Party{Demand: int64(w[i] * c.Demand * c.Period.Seconds()), Floor: int64(float64(c.Limit) * c.Options.Floor)}
		}
		return share.Split(c.Limit, parties, c.Options.Policy)
	}
	tol := int64(math.Ceil(0.05 * float64(c.Limit)))
	within := func(shares, want []int64) bool {
		for i, s := range shares {
			if s < want[i]-tol || s > want[i]+tol {
				return false
			}
		}
		return true
	}
	if c.Step {
		want := target(c.Duration)
		for _, h := range held {
			if h.at >= c.Duration/3 && h.at <= c.Duration/3+10*time.Second && within(h.shares, want) {
				return float64((h.at - c.Duration/3).Milliseconds())
			}
		}
		return -1
	}
	from, to := c.Duration/3, 2*c.Duration/3+2*time.Second
	for lag := time.Duration(0); lag <= 10*time.Second; lag += 100 * time.Millisecond {
		ok, seen := true, false
		for _, h := range held {
			if h.at < from+lag || h.at > to+lag {
				continue
			}
			seen = true
			ok = ok && within(h.shares, target(h.at-lag))
		}
		if ok && seen {
			return float64(lag.Milliseconds())
		}
	}
	return -1
}

func quantileMS(ds []time.Duration, q float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	i := min(len(ds)-1, int(math.Ceil(q*float64(len(ds))))-1)
	return math.Round(float64(ds[max(0, i)].Microseconds())/10) / 100
}
