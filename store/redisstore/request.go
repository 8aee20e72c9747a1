package redisstore

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algorithm"
)

// A call is one request on its way down the layers of a Store (see
// "Layers" in the package doc): the request, its algorithm (never empty)
// and its Redis key. Each layer decides it in process or hands it to the
// next.
type call struct {
	r   floodgate.Request
	alg floodgate.Algorithm
	key string
	// now is the time passed to the script: Request.Now, the Clock with
	// ClientTime, or -1 for the server's TIME, in µs. The layer that sends
	// the call to Redis sets it (runner.stamp); the layers above leave it.
	now int64
}

// wrap wraps err with the call's algorithm and key, as every error of a
// decision is.
func (c *call) wrap(err error) error {
	return fmt.Errorf("redisstore: %s %s: %w", c.alg, c.key, err)
}

// argsPerRequest is ARGS_PER_REQUEST in common.lua: the ARGV strings of one
// request.
const argsPerRequest = 7

// refundWidth is REFUND_WIDTH in refund.lua: the ARGV strings of one
// request of the refund script (its algorithm, the request, at_us).
const refundWidth = 2 + argsPerRequest

// Flags of a request, as common.lua reads them.
const (
	flagFirstHit      = 1
	flagCountRejected = 2
	flagRelease       = 4
	flagCalendar      = 8
)

// multiSetWidth and multiReqWidth are MULTI_SET_WIDTH and MULTI_REQ_WIDTH
// in multi.lua: the ARGV strings of one parameter set and of one request.
const (
	multiSetWidth = 6
	multiReqWidth = 3
)

// fastSetWidth is SET_WIDTH in fixed_window_multi.lua: the ARGV strings of
// one parameter set.
const fastSetWidth = 5

// requestFlags is the flags argument of r under params p, as common.lua
// reads it.
func requestFlags(p algorithm.Params, r *floodgate.Request) int {
	flags := 0
	if p.FirstHit {
		flags |= flagFirstHit
	}
	if p.CountRejected {
		flags |= flagCountRejected
	}
	if r.Release {
		flags |= flagRelease
	}
	return flags
}

// requestIDOf is the id argument of r under alg: a new random id for a
// sliding log's entries, the lease of a concurrency limit, else empty.
func requestIDOf(r *floodgate.Request, alg floodgate.Algorithm) string {
	switch alg {
	case floodgate.SlidingWindowLog:
		return requestID()
	case floodgate.Concurrency:
		return r.Lease
	}
	return ""
}

// appendRequest appends the ARGV of one request, in the layout of
// parse_request in common.lua.
func appendRequest(args []string, r *floodgate.Request, alg floodgate.Algorithm, now int64) []string {
	p := r.Limit.Params()
	flags := requestFlags(p, r)
	id := requestIDOf(r, alg)
	if p.Wait > 0 {
		// A token bucket's reservation that waits: the units it may owe
		// (common.lua's parse_request).
		id = strconv.FormatInt(p.Wait, 10)
	}
	if r.Limit.Calendar.Unit != "" {
		flags |= flagCalendar
		id = windowsArg(r.Limit.Calendar, now)
	}
	// The five numbers are written into one string and sliced from it: one
	// allocation instead of one per number above 99.
	var buf [5 * 20]byte
	var ends [5]int
	b := buf[:0]
	for i, n := range [5]int64{now, p.Limit, p.Period, r.Cost, p.Burst} {
		b = strconv.AppendInt(b, n, 10)
		ends[i] = len(b)
	}
	nums := string(b)
	return append(args,
		nums[:ends[0]],
		nums[ends[0]:ends[1]],
		nums[ends[1]:ends[2]],
		nums[ends[2]:ends[3]],
		nums[ends[3]:ends[4]],
		strconv.Itoa(flags),
		id,
	)
}

// windowsArg is the id argument of a calendar limit's request decided at
// now (µs; -1 for the server's clock, when the windows are those around
// the process clock, and the script fails if the server's time is not in
// them): its algorithm.Windows, "<w0>:<w1>:<w2>:<w3>" (see common.lua).
func windowsArg(c floodgate.Calendar, now int64) string {
	if now < 0 {
		now = time.Now().UnixMicro()
	}
	w := c.Windows(now)
	b := make([]byte, 0, 4*17)
	for i, x := range w {
		if i > 0 {
			b = append(b, ':')
		}
		b = strconv.AppendInt(b, x, 10)
	}
	return string(b)
}

// requestID is 96 random bits, the prefix of a call's sliding log members,
// which keeps them unique: two calls in the same microsecond collide with
// probability 2^-96.
func requestID() string {
	var b [12]byte
	binary.LittleEndian.PutUint64(b[:8], rand.Uint64())
	binary.LittleEndian.PutUint32(b[8:], rand.Uint32())
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// replyLen is the number of integers in the reply of one decision.
const replyLen = 6

// decode checks the reply of one decision ({allowed, limit, remaining,
// reset_after_us, retry_after_us, now_us}) and converts it. wantNow is the
// time passed to the script, or -1 for the server's.
func decode(v []int64, wantNow int64) (floodgate.Decision, error) {
	allowed, limit, remaining, resetAfter, retryAfter, now := v[0], v[1], v[2], v[3], v[4], v[5]
	bad := func(field string, n int64) (floodgate.Decision, error) {
		return floodgate.Decision{}, fmt.Errorf("%w: %s %d out of range", floodgate.ErrUnexpectedReply, field, n)
	}
	switch {
	case allowed != 0 && allowed != 1:
		return bad("allowed", allowed)
	case limit < 0 || limit > algorithm.MaxLimit:
		return bad("limit", limit)
	case remaining < 0 || remaining > limit:
		return bad("remaining", remaining)
	case resetAfter < 0 || resetAfter > algorithm.MaxExact:
		return bad("reset_after_us", resetAfter)
	case retryAfter < algorithm.Never || retryAfter > algorithm.MaxExact || (allowed == 1 && retryAfter != 0):
		return bad("retry_after_us", retryAfter)
	case now < 0 || now > algorithm.MaxExact || (wantNow >= 0 && now != wantNow):
		return bad("now_us", now)
	}
	d := algorithm.Decision{Allowed: allowed == 1, Limit: limit, Remaining: remaining, ResetAfter: resetAfter, RetryAfter: retryAfter}
	return floodgate.FromAlgorithm(d, now), nil
}
