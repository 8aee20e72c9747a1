package grant

import (
	"crypto/rand"
	"encoding/hex"
	"slices"
	"time"

	"github.com/floodgate-rl/floodgate/share"
)

// Incarnation returns a random name for this process's grants, 12 hex
// digits, to put after a holder's own name ("eu-west#" + Incarnation()):
// a restarted process is then a new holder, and the old one's share stays
// counted until its term ends, since the old process may have spent it.
func Incarnation() string {
	var b [6]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+).
	return hex.EncodeToString(b[:])
}

// Target is the share the holder of g should hold of limit: the policy's
// split of limit over every live holder's demand and floor as home last
// reported them, with the holder's own party replaced by own (its demand
// measured since). ok is false when g names no place for the holder (no
// grant yet, or a release), so no split is known: the holder then asks
// for what is free.
func (g Grant) Target(limit int64, own share.Party, p share.Policy) (target int64, ok bool) {
	if g.Self < 0 || g.Self >= len(g.Parties) {
		return 0, false
	}
	parties := slices.Clone(g.Parties)
	parties[g.Self] = own
	return share.Split(limit, parties, p)[g.Self], true
}

// Demand is a holder's recent demand of one key, in units per Period, as
// Request.Demand reports it: each measure is averaged with the one
// before, so older measures weigh half as much each. The zero value has
// no measure yet. It is not safe for concurrent use.
type Demand struct {
	// Rate is the current measure, 0 before the first.
	Rate     int64
	measured bool
}

// Measure folds units asked over elapsed into d, per period, and returns
// the new Rate. When elapsed or period is not above zero, the units
// themselves are the measure (a first report with no time span). A rate
// is at most share.MaxDemand, the most a split tells apart.
func (d *Demand) Measure(units uint64, elapsed, period time.Duration) int64 {
	var rate int64
	if elapsed > 0 && period > 0 {
		// Clamped before the conversion, which is undefined out of range.
		rate = int64(min(float64(units)*float64(period)/float64(elapsed), float64(share.MaxDemand)))
	} else {
		rate = int64(min(units, share.MaxDemand))
	}
	if d.measured {
		rate = (d.Rate + rate) / 2
	}
	d.Rate, d.measured = rate, true
	return rate
}

// Measured reports whether d holds a measure.
func (d *Demand) Measured() bool { return d.measured }
