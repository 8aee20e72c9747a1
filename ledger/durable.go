package ledger

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// Accounts is a Store as the Ledger of durable quotas (Wrap): each commit
// of a durable reservation becomes an Entry, and a lost counter is
// rebuilt from Store.Usage. It counts what it does, for metrics (Stats).
// Make one with Durable.
//
// # Group commit
//
// Commits that arrive while the ledger is writing wait, and are written
// together in the next Store.Record, one transaction: a ledger flushes to
// disk (or makes a round trip) once per write, not once per commit, so
// concurrent commits share the cost. No timer holds a commit back:
// a commit that finds no write in progress (fewer than MaxWrites) is
// written at once, alone; only those that arrive during a write wait for
// it, and then go together. Each caller's commits are checked (Check)
// before they join a group, so a bad one fails alone; a group is one
// transaction, all of it written or none; two commits of one Key and ID
// in a group (concurrent retries) are written once, both answered.
type Accounts struct {
	s Store
	o DurableOptions

	mu       sync.Mutex
	queue    []*pendingRecord
	queued   int // entries in queue
	inflight int

	records, written, replayed, recordFailures, writes, dropped atomic.Int64
	writeFailures                                               atomic.Int64
	reads, readFailures                                         atomic.Int64
	recordNanos, readNanos                                      atomic.Int64
}

// pendingRecord is the commits of one Record call, waiting for a write.
type pendingRecord struct {
	ctx     context.Context
	entries []Entry
	done    chan error
}

// DurableOptions configure Durable. The zero value is the defaults.
type DurableOptions struct {
	// MaxWrites is the most Store.Record calls in progress at once; more
	// commits wait and are written together. 0 means 1, which suits
	// SQLite (one writer at a time); PostgreSQL takes as many as its pool
	// has connections.
	MaxWrites int
	// MaxBatch is the most entries in one write; 0 means 512.
	MaxBatch int
	// MaxQueue is the most entries waiting for a write; a Record that
	// would queue more fails at once (ErrBusy) instead of waiting on a
	// ledger that is down. 0 means 16 × MaxBatch.
	MaxQueue int
	// WriteTimeout bounds each write, which serves every commit of its
	// group whatever their callers' deadlines; 0 means 30 s.
	WriteTimeout time.Duration
}

var _ Ledger = (*Accounts)(nil)

// Durable returns s as the ledger of durable quotas, for Wrap:
//
//	quotas, err := ledger.Wrap(store, ledger.Durable(pg, nil), nil)
//	limiter, err := floodgate.New(quotas, nil)
//
// o may be nil. It does not close s.
func Durable(s Store, o *DurableOptions) *Accounts {
	a := &Accounts{s: s}
	if o != nil {
		a.o = *o
	}
	if a.o.MaxWrites <= 0 {
		a.o.MaxWrites = 1
	}
	if a.o.MaxBatch <= 0 {
		a.o.MaxBatch = 512
	}
	if a.o.MaxQueue <= 0 {
		a.o.MaxQueue = 16 * a.o.MaxBatch
	}
	if a.o.WriteTimeout <= 0 {
		a.o.WriteTimeout = 30 * time.Second
	}
	return a
}

// Store returns the ledger's store.
func (a *Accounts) Store() Store { return a.s }

// Record writes the commits as entries, in one transaction with any
// commits that wait beside them (see Group commit): a commit the ledger
// holds already (same Key and ID) is not written again. When ctx ends
// first, Record returns its error and the commits may still be written:
// not acknowledged, and a retry finds them.
func (a *Accounts) Record(ctx context.Context, commits []Commit) error {
	p := &pendingRecord{ctx: ctx, entries: make([]Entry, len(commits)), done: make(chan error, 1)}
	for i, c := range commits {
		p.entries[i] = Entry{Key: c.Key, Limit: c.Limit, Window: c.Window, Units: c.Units, ID: c.ID, At: c.At.Truncate(time.Microsecond)}
	}
	if err := Check(p.entries); err != nil {
		a.recordFailures.Add(1)
		return err
	}
	a.mu.Lock()
	if a.queued+len(p.entries) > a.o.MaxQueue {
		a.mu.Unlock()
		a.recordFailures.Add(1)
		return fmt.Errorf("ledger: %d entries wait for the ledger already (DurableOptions.MaxQueue): %w", a.queued, ErrBusy)
	}
	a.queue = append(a.queue, p)
	a.queued += len(p.entries)
	lead := a.inflight < a.o.MaxWrites
	if lead {
		a.inflight++
	}
	a.mu.Unlock()
	if lead {
		// The write runs apart, so that this caller waits no longer than
		// its context, whatever the write takes.
		go a.flush()
	}
	var err error
	select {
	case err = <-p.done:
	case <-ctx.Done():
		// A write may have answered at the same moment: its answer wins.
		select {
		case err = <-p.done:
		default:
			err = ctx.Err()
		}
	}
	if err != nil {
		a.recordFailures.Add(1)
	} else {
		a.records.Add(1)
	}
	return err
}

// ErrBusy is wrapped by Accounts.Record's error when more commits wait for
// the ledger than DurableOptions.MaxQueue: the ledger is down or too slow,
// and waiting longer would only grow the queue.
var ErrBusy = errors.New("ledger: busy")

// flush writes the waiting commits, a group of at most MaxBatch entries
// (and at least one caller's) at a time, until none waits. A caller whose
// context ended before its commits were taken is left out: it was
// answered with its context's error, so its commits must not be written
// behind its back. It runs on a goroutine of its own, one of MaxWrites.
func (a *Accounts) flush() {
	for {
		a.mu.Lock()
		var group []*pendingRecord
		size := 0
		for len(a.queue) > 0 {
			p := a.queue[0]
			if p.ctx.Err() != nil {
				a.queue = a.queue[1:]
				a.queued -= len(p.entries)
				a.dropped.Add(1)
				continue
			}
			if len(group) > 0 && size+len(p.entries) > a.o.MaxBatch {
				break
			}
			a.queue = a.queue[1:]
			a.queued -= len(p.entries)
			size += len(p.entries)
			group = append(group, p)
		}
		if len(group) == 0 {
			a.inflight--
			a.mu.Unlock()
			return
		}
		a.mu.Unlock()
		a.write(group)
	}
}

// write records a group's entries in one Store.Record, and answers each
// caller.
func (a *Accounts) write(group []*pendingRecord) {
	ctx, cancel := context.WithTimeout(context.Background(), a.o.WriteTimeout)
	defer cancel()
	type keyID struct{ key, id string }
	var batch []Entry
	var at [][]int // at[i][j]: the batch index of group[i].entries[j]
	seen := make(map[keyID]int)
	for _, p := range group {
		idx := make([]int, len(p.entries))
		for j, e := range p.entries {
			k := keyID{e.Key, e.ID}
			if b, ok := seen[k]; ok {
				idx[j] = b
				continue
			}
			seen[k] = len(batch)
			idx[j] = len(batch)
			batch = append(batch, e)
		}
		at = append(at, idx)
	}
	start := time.Now()
	written, err := a.s.Record(ctx, batch)
	a.recordNanos.Add(int64(time.Since(start)))
	if err != nil {
		a.writeFailures.Add(1)
	} else {
		a.writes.Add(1)
	}
	counted := make([]bool, len(batch))
	for i, p := range group {
		if err == nil {
			for _, b := range at[i] {
				// The first commit of a Key and ID in the group is the one
				// the ledger wrote or found; a second is a replay of it.
				if written[b] && !counted[b] {
					a.written.Add(1)
				} else {
					a.replayed.Add(1)
				}
				counted[b] = true
			}
		}
		p.done <- err
	}
}

// Used returns the ledger's units for key in the window of limit that
// contains at (Store.Usage): the window a lost counter is rebuilt in.
func (a *Accounts) Used(ctx context.Context, key string, limit floodgate.Limit, at time.Time) (time.Time, int64, error) {
	start := time.Now()
	u, err := a.s.Usage(ctx, key, WindowFor(limit, at).Period, at)
	a.readNanos.Add(int64(time.Since(start)))
	if err == nil {
		a.reads.Add(1)
	}
	if err != nil {
		a.readFailures.Add(1)
		return time.Time{}, 0, err
	}
	return u.Window.Start, u.Units, nil
}

// Ping checks that the ledger can be reached (Store.Ping), for a
// service's readiness.
func (a *Accounts) Ping(ctx context.Context) error { return a.s.Ping(ctx) }

// Stats is what an Accounts did since it was made. Every count only
// grows.
type Stats struct {
	// Records is the calls of Record that succeeded (one per settle of a
	// durable reservation); RecordFailures those that failed and were not
	// acknowledged; Dropped those of the failures whose commits were never
	// written because their caller had given up before a write took them.
	Records, RecordFailures, Dropped int64
	// Writes is the Store.Record calls that succeeded, fewer than Records
	// when commits were written together; WriteFailures those that failed.
	// RecordTime / (Writes + WriteFailures) is the mean time of a write.
	Writes, WriteFailures int64
	// Written is the entries written; Replayed those the ledger held
	// already (a retried commit).
	Written, Replayed int64
	// Reads is the reads of a window's units that succeeded (a counter
	// checked at the start of its window, or rebuilt); ReadFailures those
	// that failed.
	Reads, ReadFailures int64
	// RecordTime and ReadTime are the time spent in writes and reads, in
	// total.
	RecordTime, ReadTime time.Duration
}

// Stats returns the counts so far.
func (a *Accounts) Stats() Stats {
	return Stats{
		Records: a.records.Load(), RecordFailures: a.recordFailures.Load(), Dropped: a.dropped.Load(),
		Writes: a.writes.Load(), WriteFailures: a.writeFailures.Load(),
		Written: a.written.Load(), Replayed: a.replayed.Load(),
		Reads: a.reads.Load(), ReadFailures: a.readFailures.Load(),
		RecordTime: time.Duration(a.recordNanos.Load()), ReadTime: time.Duration(a.readNanos.Load()),
	}
}
