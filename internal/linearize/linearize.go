// Package linearize checks that a floodgate.Store is linearizable: that a
// history of concurrent Apply calls, recorded with a Recorder, could have
// come from the calls taking effect one at a time, each at some instant
// between its call and its return, in the order that the algorithm package
// (the sequential model) would have decided them exactly as the store did.
//
// The checker is github.com/anishathalye/porcupine. The model steps the
// algorithm package's Step functions themselves, so the store is held to
// the same code memstore runs; it keeps one state per key, algorithm and
// period, as floodgate.Store does, and porcupine checks each such partition
// on its own.
//
// # Time
//
// Every Decision carries the time the store decided at (Decision.Now, the
// Redis server's TIME by default), and the model steps at that time. With
// Options.Monotonic the model also requires that time never goes back from
// one step of a key to the next in the linearization: true of a Redis node,
// which runs one script at a time and reads its clock inside it, but not of
// memstore, which reads its clock before taking the key's lock (the
// algorithms accept a clock that goes back, so memstore stays
// linearizable without it).
//
// # Calls that fail
//
// A call that returned an error (a timeout, a lost connection) may or may
// not have taken effect, and if it did, at a time nobody saw. The model is
// nondeterministic there, and exact:
//
//   - A request with its own Request.Now took effect at that time or not
//     at all: two possible states.
//   - A request decided by the store's clock under an aligned fixed window
//     took effect in one of the windows from the key's last step to the end
//     of the history, or not at all: the state after a fixed window step
//     depends on the window the step fell in, not on the instant.
//
// For the other algorithms the instant a lost call ran changes the state
// in a way later calls observe to the microsecond (a GCRA arrival time, a
// log entry's expiry), so Check refuses such a history rather than guess:
// give those requests their own Now when calls are meant to fail.
//
// A failed call is recorded as never returning (its return is the end of
// the history), so porcupine may place it anywhere after its call.
package linearize

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algorithm"
)

// Input is the input of one recorded call.
type Input struct {
	// Req is the request as the caller made it: of Apply, or of Reserve
	// (its Cost is the units held) or Settle (Cost unused).
	Req floodgate.Request
	// Op is the call: Apply (empty), OpReserve or OpSettle; Hold holds the
	// reservation's side of the last two.
	Op   Op
	Hold HoldInput
	// Short is set when the call was given the workload's short deadline.
	Short bool
	// Earliest and Horizon bound the time, in µs since the epoch, at which
	// a failed call decided by the store's clock may have taken effect:
	// from a millisecond before the call (the store's clock is this
	// machine's, the slack is for its rounding) to the end of the history.
	// The Recorder sets them.
	Earliest, Horizon int64
}

// Output is what one recorded call returned.
type Output struct {
	// Known is set when the call returned a Decision; otherwise it failed
	// and may or may not have taken effect.
	Known bool
	// D is the decision of a known call; for a settle, the state after.
	D floodgate.Decision
	// Replayed, Settlement and Code are a reservation's side: a reserve or
	// settle answered from the first time, what a settle did, and how it
	// ended (algorithm.Settled, Replayed, Conflict or TooLate; 0 for
	// unknown reservations, with Unknown set).
	Replayed   bool
	Settlement algorithm.Settlement
	Code       algorithm.SettleCode
	Unknown    bool
	// Err is the error of a failed call, for descriptions.
	Err string
}

// Recorder records a history of concurrent calls. Its methods are safe for
// concurrent use. The zero value is not usable; call NewRecorder.
type Recorder struct {
	start time.Time
	mu    sync.Mutex
	ops   []record
	// first and last are the earliest and latest Decision.Now recorded.
	first, last time.Time
}

type record struct {
	op         porcupine.Operation
	callWall   time.Time
	returnWall time.Time
}

// NewRecorder returns an empty Recorder whose timestamps count from now.
func NewRecorder() *Recorder {
	return &Recorder{start: time.Now()}
}

// Apply calls s.Apply(ctx, r) as client, records the call and returns what
// it returned. client numbers the caller (a goroutine) from 0, for the
// visualisation; a client must not overlap its own calls.
func (rec *Recorder) Apply(ctx context.Context, s floodgate.Store, client int, r floodgate.Request) (floodgate.Decision, error) {
	return rec.apply(ctx, s, client, Input{Req: r})
}

func (rec *Recorder) apply(ctx context.Context, s floodgate.Store, client int, in Input) (floodgate.Decision, error) {
	r := in.Req
	callWall := time.Now()
	d, err := s.Apply(ctx, r)
	returnWall := time.Now()
	out := Output{Known: err == nil, D: d}
	if err != nil {
		out.Err = err.Error()
	}
	op := porcupine.Operation{
		ClientId: client,
		Input:    in,
		Call:     callWall.Sub(rec.start).Nanoseconds(),
		Output:   out,
		Return:   returnWall.Sub(rec.start).Nanoseconds(),
	}
	rec.mu.Lock()
	rec.ops = append(rec.ops, record{op: op, callWall: callWall, returnWall: returnWall})
	if err == nil {
		if rec.first.IsZero() || d.Now.Before(rec.first) {
			rec.first = d.Now
		}
		if d.Now.After(rec.last) {
			rec.last = d.Now
		}
	}
	rec.mu.Unlock()
	return d, err
}

// Operations returns the history: each call as a porcupine.Operation whose
// Input is an Input and Output an Output. A failed call returns at the end
// of the history, after every other call, and its Horizon is the wall
// clock then.
func (rec *Recorder) Operations() []porcupine.Operation {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	end := time.Now()
	endNS := end.Sub(rec.start).Nanoseconds() + 1
	ops := make([]porcupine.Operation, len(rec.ops))
	for i, r := range rec.ops {
		op := r.op
		if !op.Output.(Output).Known {
			in := op.Input.(Input)
			in.Earliest, in.Horizon = r.callWall.UnixMicro()-1000, end.UnixMicro()+1
			op.Input, op.Return = in, endNS
		}
		ops[i] = op
	}
	return ops
}

// Span is the time from the earliest to the latest decision recorded.
func (rec *Recorder) Span() time.Duration {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.last.Sub(rec.first)
}

// Stats counts the calls of a history.
type Stats struct {
	Calls, Failed, Keys int
	// Collateral is the number of failed calls that were not given a short
	// deadline: they failed because another call's deadline closed the
	// connection they shared.
	Collateral int
}

// Stats counts the calls recorded so far, the failed ones, and the states
// (key, algorithm and period) they touched.
func (rec *Recorder) Stats() Stats {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var st Stats
	keys := make(map[stateKey]bool)
	for _, r := range rec.ops {
		st.Calls++
		if !r.op.Output.(Output).Known {
			st.Failed++
			if !r.op.Input.(Input).Short {
				st.Collateral++
			}
		}
		keys[keyOf(r.op.Input.(Input).Req)] = true
	}
	st.Keys = len(keys)
	return st
}

// CheckClock reports every known call whose Decision.Now lies outside the
// wall-clock interval of the call, widened by slack on each side. For a
// store that decides by a clock of this machine (a local Redis server's
// TIME, memstore) it shows that the time the model steps at is the time
// the call really ran.
func (rec *Recorder) CheckClock(slack time.Duration) error {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var errs []error
	for _, r := range rec.ops {
		out := r.op.Output.(Output)
		if !out.Known {
			continue
		}
		if out.D.Now.Before(r.callWall.Add(-slack)) || out.D.Now.After(r.returnWall.Add(slack)) {
			errs = append(errs, fmt.Errorf("linearize: decided at %v, outside the call [%v, %v]",
				out.D.Now.UTC(), r.callWall.UTC(), r.returnWall.UTC()))
			if len(errs) == 10 {
				break
			}
		}
	}
	return errors.Join(errs...)
}

// Options configure the model. The zero value checks a store that may
// decide a key's steps at times out of order.
type Options struct {
	// Monotonic requires that the time of a key's steps (Decision.Now)
	// never goes back in the linearization: true of a Redis node.
	Monotonic bool
}

// ErrUnmodelled is returned by Check for a history with a failed call whose
// effect the model cannot enumerate (see the package doc).
var ErrUnmodelled = errors.New("linearize: a failed call the model cannot enumerate")

// maxWindows is the most windows a failed call's candidate times may span.
const maxWindows = 10_000

// Check checks ops (from Recorder.Operations) against the model, for at
// most timeout, and returns porcupine's verdict (Ok, Illegal, or Unknown if
// the time ran out) and the information Visualize needs.
func Check(ops []porcupine.Operation, opts Options, timeout time.Duration) (porcupine.CheckResult, porcupine.LinearizationInfo, error) {
	for _, op := range ops {
		in, out := op.Input.(Input), op.Output.(Output)
		if out.Known {
			continue
		}
		if !modelled(in.Req) {
			return porcupine.Unknown, porcupine.LinearizationInfo{}, fmt.Errorf("%w: %s failed (%s) without its own Now", ErrUnmodelled, in.Req.Limit, out.Err)
		}
		if windows := (in.Horizon - in.Earliest) / int64(in.Req.Limit.Period/time.Microsecond); in.Req.Now.IsZero() && windows > maxWindows {
			return porcupine.Unknown, porcupine.LinearizationInfo{}, fmt.Errorf("%w: %s failed (%s) %d windows before the end of the history (at most %d)",
				ErrUnmodelled, in.Req.Limit, out.Err, windows, maxWindows)
		}
	}
	res, info := porcupine.CheckOperationsVerbose(Model(opts), ops, timeout)
	return res, info, nil
}

// Visualize writes porcupine's HTML visualisation of a checked history to
// path.
func Visualize(opts Options, info porcupine.LinearizationInfo, path string) error {
	return porcupine.VisualizePath(Model(opts), info, path)
}

// modelled reports whether the model can enumerate the effects of r when
// the call failed.
func modelled(r floodgate.Request) bool {
	if !r.Now.IsZero() {
		return true
	}
	return r.Limit.EffectiveAlgorithm() == floodgate.FixedWindow && r.Limit.Window != floodgate.FirstHit
}

// stateKey is what a store keeps one state for.
type stateKey struct {
	key    string
	alg    floodgate.Algorithm
	period time.Duration
}

func keyOf(r floodgate.Request) stateKey {
	return stateKey{r.Key, r.Limit.EffectiveAlgorithm(), r.Limit.Period}
}

// state is the model's state of one key: the algorithm's state and the
// time of the last step. The model's states are shared: a step works on
// a copy (algorithm.State.Clone), never on st's arrays.
type state struct {
	st   algorithm.State
	last int64
	// holds are the key's reservations, by ID (reserve.go).
	holds []heldID
}

// algState is a copy of s's algorithm state, of r's algorithm: the
// initial state, shared by every partition, is the zero State.
func algState(s state, r floodgate.Request) algorithm.State {
	st := s.st.Clone()
	st.Kind = r.Limit.Kind()
	return st
}

// step runs the algorithm's Step for r at now on a copy of s.
func step(s state, r floodgate.Request, now int64) (state, floodgate.Decision) {
	op := algorithm.LeaseAcquire
	if r.Release {
		op = algorithm.LeaseRelease
	}
	var d algorithm.Decision
	s.st, d = algState(s, r).StepLease(r.Limit.Params(), now, r.Cost, r.Lease, op)
	s.last = max(s.last, now)
	return s, floodgate.FromAlgorithm(d, now)
}

// nextStates is the nondeterministic step: every state the key may be in
// after the call, given what it returned.
func nextStates(opts Options, s state, in Input, out Output) []state {
	r := in.Req
	if in.Op != 0 {
		// Reservations are recorded with their own Now (Recorder.Reserve).
		now := r.Now.UnixMicro()
		if out.Known && !out.D.Now.IsZero() && out.D.Now.UnixMicro() != now {
			return nil
		}
		if in.Op == OpReserve {
			return reserveStates(s, in, out, now, out.Known)
		}
		return settleStates(s, in, out, now, out.Known)
	}
	if out.Known {
		now := out.D.Now.UnixMicro()
		if !r.Now.IsZero() && r.Now.UnixMicro() != now {
			return nil
		}
		if opts.Monotonic && now < s.last {
			return nil
		}
		next, d := step(s, r, now)
		if d != out.D {
			return nil
		}
		return []state{next}
	}
	// The call failed: it took effect or it did not.
	states := []state{s}
	if !r.Now.IsZero() {
		next, _ := step(s, r, r.Now.UnixMicro())
		return append(states, next)
	}
	if !modelled(r) {
		return states // Check refuses such a history before it gets here.
	}
	// An aligned fixed window: one candidate per window between the later
	// of the call and (with Monotonic) the key's last step, and the horizon, at the earliest
	// instant it may have run in it.
	p := int64(r.Limit.Period / time.Microsecond)
	from := in.Earliest
	if opts.Monotonic {
		from = max(from, s.last)
	}
	for w := from - from%p; w <= in.Horizon; w += p {
		next, _ := step(s, r, max(from, w))
		states = append(states, next)
	}
	return states
}

// equal compares two states of one partition, whose algorithm is one: the
// initial state's Kind is the zero Kind, whatever the partition's.
func equal(a, b state) bool {
	a.st.Kind = b.st.Kind
	return a.st.Equal(b.st) && a.last == b.last && slices.Equal(a.holds, b.holds)
}

func hash(s state) uint64 {
	h := fnv.New64a()
	fmt.Fprint(h, s.st.Small, s.last, s.st.Log, s.st.Units, s.holds)
	return h.Sum64()
}

// Model returns the porcupine model of a Store: partitioned by key,
// algorithm and period, each partition stepped by the algorithm package.
func Model(opts Options) porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Partition: partition,
		Init:      func() []any { return []any{state{}} },
		Step: func(st, input, output any) []any {
			next := nextStates(opts, st.(state), input.(Input), output.(Output))
			out := make([]any, len(next))
			for i, s := range next {
				out[i] = s
			}
			return out
		},
		Equal:             func(a, b any) bool { return equal(a.(state), b.(state)) },
		Hash:              func(s any) uint64 { return hash(s.(state)) },
		DescribeOperation: describeOperation,
		DescribeState:     func(s any) string { return describeState(s.(state)) },
	}
	return nm.ToModel()
}

func partition(ops []porcupine.Operation) [][]porcupine.Operation {
	index := make(map[stateKey]int)
	var parts [][]porcupine.Operation
	for _, op := range ops {
		k := keyOf(op.Input.(Input).Req)
		i, ok := index[k]
		if !ok {
			i = len(parts)
			index[k] = i
			parts = append(parts, nil)
		}
		parts[i] = append(parts[i], op)
	}
	return parts
}

func describeOperation(input, output any) string {
	in, out := input.(Input), output.(Output)
	r := in.Req
	what := fmt.Sprintf("%s cost=%d", r.Key, r.Cost)
	switch in.Op {
	case OpReserve:
		what = fmt.Sprintf("reserve %s %s units=%d ttl=%v release=%v", in.Hold.ID, r.Key, r.Cost, in.Hold.TTL, in.Hold.Release)
	case OpSettle:
		what = fmt.Sprintf("settle %s %s actual=%d cancel=%v", in.Hold.ID, r.Key, in.Hold.Actual, in.Hold.Cancel)
	}
	if in.Op != 0 && out.Known {
		return fmt.Sprintf("%s now=%d → code=%d unknown=%v replayed=%v %+v allowed=%v remaining=%d", what, r.Now.UnixMicro(),
			out.Code, out.Unknown, out.Replayed, out.Settlement, out.D.Allowed, out.D.Remaining)
	}
	if r.Lease != "" {
		what += " lease=" + r.Lease
	}
	if r.Release {
		what += " release"
	}
	if !r.Now.IsZero() {
		what += fmt.Sprintf(" now=%d", r.Now.UnixMicro())
	}
	if !out.Known {
		return what + " → failed: " + out.Err
	}
	d := out.D
	return fmt.Sprintf("%s → allowed=%v remaining=%d reset=%dµs retry=%dµs at %d", what, d.Allowed, d.Remaining,
		d.ResetAfter.Microseconds(), retryMicros(d.RetryAfter), d.Now.UnixMicro())
}

func retryMicros(d time.Duration) int64 {
	if d == floodgate.Never {
		return math.MinInt64
	}
	return d.Microseconds()
}

func describeState(s state) string {
	switch {
	case len(s.st.Log) > 0:
		return fmt.Sprintf("log %v last=%d", s.st.Log, s.last)
	case len(s.st.Units) > 0:
		return fmt.Sprintf("leases %+v last=%d", s.st.Units, s.last)
	case s.st.Small != algorithm.Small{}:
		return fmt.Sprintf("%s %+v last=%d", s.st.Kind, s.st.Small, s.last)
	}
	return fmt.Sprintf("empty last=%d", s.last)
}
