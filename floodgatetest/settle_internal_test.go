package floodgatetest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algorithm"
)

// TestCheckSettlement: checkSettlement, which the reservation and wait
// differentials both judge a commit or cancel by, finds each way a
// store's answer can differ from the model's, and nothing in one that
// agrees.
func TestCheckSettlement(t *testing.T) {
	const nowUS = 1_000_000
	d := algorithm.Decision{Allowed: true, Limit: 10, Remaining: 7, ResetAfter: 300_000}
	after := floodgate.FromAlgorithm(d, nowUS)
	model := algorithm.Settlement{Refunded: 3, Charged: 1}
	agrees := floodgate.Settlement{Refunded: 3, Charged: 1, Decision: after}
	with := func(f func(*floodgate.Settlement)) []floodgate.Settlement {
		s := agrees
		f(&s)
		return []floodgate.Settlement{s}
	}
	for _, c := range []struct {
		name  string
		sts   []floodgate.Settlement
		err   error
		code  algorithm.SettleCode
		known bool   // want the state after
		msg   string // want a message containing it; "" for none
	}{
		{"settled", []floodgate.Settlement{agrees}, nil, algorithm.Settled, true, ""},
		{"replayed", with(func(s *floodgate.Settlement) { s.Replayed = true }), nil, algorithm.Replayed, true, ""},
		{"conflict", nil, fmt.Errorf("x: %w", floodgate.ErrConflict), algorithm.Conflict, false, ""},
		{"too late", []floodgate.Settlement{agrees}, floodgate.ErrExpired, algorithm.TooLate, false, ""},
		{"too late, state not compared", with(func(s *floodgate.Settlement) { s.Decision.Remaining = 0 }), floodgate.ErrExpired, algorithm.TooLate, false, ""},
		{"conflict missed", []floodgate.Settlement{agrees}, nil, algorithm.Conflict, false, "<nil>, model floodgate: "},
		{"expiry missed", []floodgate.Settlement{agrees}, nil, algorithm.TooLate, false, "<nil>, model floodgate: "},
		{"wrong error", nil, floodgate.ErrConflict, algorithm.TooLate, false, ", model floodgate: "},
		{"error where settled", nil, floodgate.ErrExpired, algorithm.Settled, false, "model settled it"},
		{"no settlement", nil, nil, algorithm.Settled, false, "0 settlements"},
		{"two settlements", []floodgate.Settlement{agrees, agrees}, nil, algorithm.Settled, false, "2 settlements"},
		{"refunded", with(func(s *floodgate.Settlement) { s.Refunded = 2 }), nil, algorithm.Settled, false, "(code 1)"},
		{"charged", with(func(s *floodgate.Settlement) { s.Charged = 0 }), nil, algorithm.Settled, false, "(code 1)"},
		{"short", with(func(s *floodgate.Settlement) { s.Short = 1 }), nil, algorithm.Settled, false, "(code 1)"},
		{"replay missed", []floodgate.Settlement{agrees}, nil, algorithm.Replayed, false, "(code 2)"},
		{"replay made up", with(func(s *floodgate.Settlement) { s.Replayed = true }), nil, algorithm.Settled, false, "(code 1)"},
		{"state after", with(func(s *floodgate.Settlement) { s.Decision.Remaining = 6 }), nil, algorithm.Settled, true, "the state after differs from the model:\n\tRemaining = 6, model 7"},
		{"state after, reset", with(func(s *floodgate.Settlement) { s.Decision.ResetAfter = time.Second }), nil, algorithm.Settled, true, "ResetAfter = 1s, model 300ms"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, known, msg := checkSettlement(c.sts, c.err, model, c.code, d, nowUS)
			if c.msg == "" && msg != "" || c.msg != "" && !strings.Contains(msg, c.msg) {
				t.Errorf("message %q, want %q", msg, c.msg)
			}
			if known != c.known {
				t.Errorf("known %v, want %v", known, c.known)
			}
			if known && got != after {
				t.Errorf("after %+v, want %+v", got, after)
			}
		})
	}
}
