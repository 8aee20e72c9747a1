package ledger

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// Accounts is a Store as the floodgate.Ledger of a Limiter with durable
// quotas (floodgate.Options.Ledger): each commit of a durable reservation
// becomes an Entry, and a lost counter is rebuilt from Store.Usage. It
// counts what it does, for metrics (Stats). Make one with Durable.
type Accounts struct {
	s Store

	records, written, replayed, recordFailures atomic.Int64
	reads, readFailures                        atomic.Int64
	recordNanos, readNanos                     atomic.Int64
}

var _ floodgate.Ledger = (*Accounts)(nil)

// Durable returns s as the ledger of a Limiter's durable quotas:
//
//	limiter, err := floodgate.New(store, &floodgate.Options{Ledger: ledger.Durable(pg)})
//
// It does not close s.
func Durable(s Store) *Accounts { return &Accounts{s: s} }

// Store returns the ledger's store.
func (a *Accounts) Store() Store { return a.s }

// Record writes the commits as entries, in one transaction (Store.Record):
// a commit the ledger holds already (same Key and ID) is not written again.
func (a *Accounts) Record(ctx context.Context, commits []floodgate.Commit) error {
	entries := make([]Entry, len(commits))
	for i, c := range commits {
		entries[i] = Entry{Key: c.Key, Limit: c.Limit, Window: c.Window, Units: c.Units, ID: c.ID, At: c.At.Truncate(time.Microsecond)}
	}
	start := time.Now()
	written, err := a.s.Record(ctx, entries)
	a.recordNanos.Add(int64(time.Since(start)))
	a.records.Add(1)
	if err != nil {
		a.recordFailures.Add(1)
		return err
	}
	for _, w := range written {
		if w {
			a.written.Add(1)
		} else {
			a.replayed.Add(1)
		}
	}
	return nil
}

// Used returns the ledger's units for key in the window of limit that
// contains at (Store.Usage): the window a lost counter is rebuilt in.
func (a *Accounts) Used(ctx context.Context, key string, limit floodgate.Limit, at time.Time) (time.Time, int64, error) {
	start := time.Now()
	u, err := a.s.Usage(ctx, key, limit.Period, at)
	a.readNanos.Add(int64(time.Since(start)))
	a.reads.Add(1)
	if err != nil {
		a.readFailures.Add(1)
		return time.Time{}, 0, err
	}
	return u.Window.Start, u.Units, nil
}

// Ping checks that the ledger can be reached (Store.Ping), for a
// service's readiness.
func (a *Accounts) Ping(ctx context.Context) error { return a.s.Ping(ctx) }

// Stats is what an Accounts did since it was made.
type Stats struct {
	// Records is the calls of Record (one per settle of a durable
	// reservation); RecordFailures those that failed, and were not
	// acknowledged.
	Records, RecordFailures int64
	// Written is the entries written; Replayed those the ledger held
	// already (a retried commit).
	Written, Replayed int64
	// Reads is the reads of a window's units (a counter checked at the
	// start of its window, or rebuilt); ReadFailures those that failed.
	Reads, ReadFailures int64
	// RecordTime and ReadTime are the time spent in them, in total.
	RecordTime, ReadTime time.Duration
}

// Stats returns the counts so far.
func (a *Accounts) Stats() Stats {
	return Stats{
		Records: a.records.Load(), RecordFailures: a.recordFailures.Load(),
		Written: a.written.Load(), Replayed: a.replayed.Load(),
		Reads: a.reads.Load(), ReadFailures: a.readFailures.Load(),
		RecordTime: time.Duration(a.recordNanos.Load()), ReadTime: time.Duration(a.readNanos.Load()),
	}
}
