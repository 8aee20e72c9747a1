package ledger

import (
	"context"
	"iter"
	"time"
)

// Store is a durable ledger of committed usage: PostgreSQL
// (ledger/postgres) for several instances, SQLite (ledger/sqlite) for one
// machine. Every method is safe for concurrent use. Record and Usage are
// the methods a Limiter with durable quotas calls; Report serves billing
// (WriteReport) and reconciliation (Reconcile).
type Store interface {
	// Record writes every entry that the ledger does not hold yet, once
	// per (Key, ID), in one transaction: all of a batch's new entries or
	// none. written[i] reports whether this call wrote entries[i]; false
	// means an entry with its Key and ID was there already (a retry, or a
	// concurrent duplicate that wrote first), and that entry was left as
	// it was. The uniqueness of (Key, ID) is the store's constraint, never
	// a read before the write, so ten concurrent Records of one entry
	// write it once. An invalid batch (see Check) writes nothing and
	// returns an error wrapping floodgate.ErrInvalidRequest or
	// floodgate.ErrInvalidLimit.
	Record(ctx context.Context, entries []Entry) (written []bool, err error)
	// Usage returns what the ledger holds for key in the window of period
	// that contains at: the window with the latest Start <= at < Start +
	// period among the key's windows of that period. It is what a lost
	// counter is rebuilt from: for an Aligned quota that window is
	// WindowAt(period, at), for a FirstHit one the window its first commit
	// opened. With no entry the Usage is zero but for Key.
	Usage(ctx context.Context, key string, period time.Duration, at time.Time) (Usage, error)
	// Report returns one page of q: at most q.PageSize() windows, ordered
	// by Key (bytewise), then Window.Start, then Window.Period. A page
	// shorter than the page size is the last. All reads every page.
	Report(ctx context.Context, q Query) ([]Usage, error)
	// Ping checks that the ledger can be reached.
	Ping(ctx context.Context) error
	// Close releases the store's connections; calls after it return an
	// error wrapping ErrClosed. It returns at once for a second call.
	Close() error
}

// All returns every row of q, page after page from q.After, for a range
// over func: a failed page yields its error and ends the sequence.
func All(ctx context.Context, s Store, q Query) iter.Seq2[Usage, error] {
	return func(yield func(Usage, error) bool) {
		size := q.PageSize()
		for {
			page, err := s.Report(ctx, q)
			if err != nil {
				yield(Usage{}, err)
				return
			}
			for _, u := range page {
				if !yield(u, nil) {
					return
				}
			}
			if len(page) < size {
				return
			}
			last := page[len(page)-1]
			q.After = &last
		}
	}
}
