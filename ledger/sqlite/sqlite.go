// Package sqlite is a ledger.Store in an SQLite file, through
// modernc.org/sqlite, a translation of SQLite to Go: no cgo, so it builds
// with CGO_ENABLED=0 and needs nothing installed. It is the ledger of one
// machine (floodgate serve -ledger PATH); several instances share a
// ledger in PostgreSQL (ledger/postgres).
//
// The file is opened in WAL mode with synchronous=FULL (a Record that
// returned is on disk), a busy timeout, and one writer: every write goes
// through one connection, in a transaction begun IMMEDIATE, while readers
// use connections of their own and never block it. Other processes may
// open the file too (floodgate ledger report beside a running serve); a
// writer in another process waits up to the busy timeout.
//
// The schema is versioned (the table schema_migrations): Open applies the
// migrations a ledger lacks, each in its own transaction, so a ledger
// written by an older version opens in a newer one; a ledger written by a
// newer version than the code is an error. Times are stored as integer
// microseconds since the Unix epoch, keys as BLOBs.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/ledger"
	"modernc.org/sqlite" // the "sqlite" database/sql driver
	sqlite3 "modernc.org/sqlite/lib"
)

// DefaultBusyTimeout is how long a write waits for another process's
// write when Options.BusyTimeout is 0.
const DefaultBusyTimeout = 5 * time.Second

// Options configure Open. A nil *Options, or the zero value, means every
// default.
type Options struct {
	// BusyTimeout is how long a statement waits for a lock held by
	// another connection (another process's write) before it fails; 0
	// means DefaultBusyTimeout.
	BusyTimeout time.Duration
	// Readers is the most connections reading at once; 0 means 4.
	Readers int
}

// Ledger is a ledger.Store in an SQLite file. It is safe for concurrent
// use. Get one from Open.
type Ledger struct {
	write *sql.DB // one connection: the one writer
	read  *sql.DB

	mu     sync.RWMutex
	closed bool
}

var _ ledger.Store = (*Ledger)(nil)

// Open opens the ledger in the file at path, creating it if it does not
// exist, and brings its schema up to date. path is a file name (not
// ":memory:", whose data each connection would have apart).
func Open(ctx context.Context, path string, o *Options) (*Ledger, error) {
	var opts Options
	if o != nil {
		opts = *o
	}
	switch {
	case path == "" || path == ":memory:" || strings.HasPrefix(path, "file::memory:"):
		return nil, fmt.Errorf("sqlite: Open: %q is not a file", path)
	case opts.BusyTimeout < 0:
		return nil, fmt.Errorf("sqlite: Open: Options.BusyTimeout %v is negative", opts.BusyTimeout)
	case opts.Readers < 0:
		return nil, fmt.Errorf("sqlite: Open: Options.Readers %d is negative", opts.Readers)
	}
	if opts.BusyTimeout == 0 {
		opts.BusyTimeout = DefaultBusyTimeout
	}
	if opts.Readers == 0 {
		opts.Readers = 4
	}
	dsn := func(readOnly bool) string {
		// A file: URI, so that a name with '?' or '#' is a name; modernc
		// applies each _pragma to every new connection.
		name := strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(path)
		q := fmt.Sprintf("?_pragma=busy_timeout(%d)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_txlock=immediate",
			opts.BusyTimeout.Milliseconds())
		if readOnly {
			q += "&_pragma=query_only(1)"
		}
		return "file:" + name + q
	}
	w, err := sql.Open("sqlite", dsn(false))
	if err != nil {
		return nil, fmt.Errorf("sqlite: Open %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxIdleTime(0)
	w.SetConnMaxLifetime(0)
	if err := migrateBusy(ctx, w, opts.BusyTimeout); err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite: Open %s: %w", path, err)
	}
	r, err := sql.Open("sqlite", dsn(true))
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite: Open %s: %w", path, err)
	}
	r.SetMaxOpenConns(opts.Readers)
	r.SetMaxIdleConns(opts.Readers)
	return &Ledger{write: w, read: r}, nil
}

// migrateBusy is migrate, tried again while the file is busy, for up to
// busy: SQLite answers SQLITE_BUSY at once, without waiting the busy
// timeout, in some of the lock changes of a new file that several
// connections open together (one of them making it WAL as another reads
// its schema); TestConcurrentOpen met it one run in a few dozen.
func migrateBusy(ctx context.Context, db *sql.DB, busy time.Duration) error {
	deadline := time.Now().Add(busy)
	backoff := time.Millisecond
	for {
		err := migrate(ctx, db)
		var se *sqlite.Error
		if err == nil || !errors.As(err, &se) || se.Code()&0xff != sqlite3.SQLITE_BUSY || time.Now().After(deadline) {
			return err
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		backoff = min(2*backoff, 50*time.Millisecond)
	}
}

// migrate applies the migrations db lacks, each in a transaction that
// holds the write lock (BEGIN IMMEDIATE), so that two processes opening
// one file apply each migration once.
func migrate(ctx context.Context, db *sql.DB) error {
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
	version    INTEGER PRIMARY KEY,
	name       TEXT    NOT NULL,
	applied_us INTEGER NOT NULL
)`); err != nil {
		return fmt.Errorf("schema_migrations: %w", err)
	}
	for {
		done, err := migrateOne(ctx, db)
		if err != nil || done {
			return err
		}
	}
}

// migrateOne applies the next migration, if any; done reports that there
// was none.
func migrateOne(ctx context.Context, db *sql.DB) (done bool, err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer tx.Rollback()
	var version int
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&version); err != nil {
		return false, err
	}
	switch {
	case version > len(migrations):
		return false, fmt.Errorf("the ledger's schema is version %d, written by a newer floodgate; this one knows versions up to %d", version, len(migrations))
	case version == len(migrations):
		return true, nil
	}
	m := migrations[version]
	if _, err := tx.ExecContext(ctx, m.sql); err != nil {
		return false, fmt.Errorf("migration %d (%s): %w", version+1, m.name, err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_us) VALUES (?, ?, ?)`,
		version+1, m.name, time.Now().UnixMicro()); err != nil {
		return false, fmt.Errorf("migration %d (%s): %w", version+1, m.name, err)
	}
	return false, tx.Commit()
}

// use runs f unless the ledger is closed; Close waits for the calls in
// progress.
func (l *Ledger) use(op string, f func() error) error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return fmt.Errorf("sqlite: %s: %w", op, ledger.ErrClosed)
	}
	if err := f(); err != nil {
		return fmt.Errorf("sqlite: %s: %w", op, err)
	}
	return nil
}

const insertEntry = `INSERT INTO ledger_entries
	(key, id, algorithm, quota, period_us, alignment, window_start_us, units, committed_at_us)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
	ON CONFLICT (key, id) DO NOTHING`

// Record writes the entries the ledger lacks in one transaction; see
// ledger.Store.
func (l *Ledger) Record(ctx context.Context, entries []ledger.Entry) ([]bool, error) {
	if err := ledger.Check(entries); err != nil {
		return nil, fmt.Errorf("sqlite: Record: %w", err)
	}
	written := make([]bool, len(entries))
	err := l.use("Record", func() error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if len(entries) == 0 {
			return nil
		}
		tx, err := l.write.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		stmt, err := tx.PrepareContext(ctx, insertEntry)
		if err != nil {
			return err
		}
		defer stmt.Close()
		for i := range entries {
			e := &entries[i]
			res, err := stmt.ExecContext(ctx, []byte(e.Key), e.ID, string(e.Limit.EffectiveAlgorithm()), e.Limit.Limit,
				e.Period().Microseconds(), ledger.Alignment(e.Limit), e.Window.UnixMicro(), e.Units, e.At.UnixMicro())
			if err != nil {
				return err
			}
			n, err := res.RowsAffected()
			if err != nil {
				return err
			}
			written[i] = n == 1
		}
		return tx.Commit()
	})
	if err != nil {
		return nil, err
	}
	return written, nil
}

// selectUsage is the columns of a Usage, grouped by window; the latest
// entry (by committed_at_us, then id) gives the window's quota.
const selectUsage = `SELECT key, window_start_us, period_us, SUM(units), COUNT(*), MIN(committed_at_us), MAX(committed_at_us),
	(SELECT l.quota || ' ' || l.alignment FROM ledger_entries l
		WHERE l.key = e.key AND l.window_start_us = e.window_start_us AND l.period_us = e.period_us
		ORDER BY l.committed_at_us DESC, l.id DESC LIMIT 1)
	FROM ledger_entries e`

// Usage returns the units of key's window of period that contains at;
// see ledger.Store.
func (l *Ledger) Usage(ctx context.Context, key string, period time.Duration, at time.Time) (ledger.Usage, error) {
	if err := ledger.CheckUsage(key, period, at); err != nil {
		return ledger.Usage{}, fmt.Errorf("sqlite: Usage: %w", err)
	}
	atUS, periodUS := at.UnixMicro(), period.Microseconds()
	var us []ledger.Usage
	err := l.use("Usage", func() error {
		var err error
		us, err = l.query(ctx, selectUsage+`
	WHERE key = ? AND period_us = ? AND window_start_us <= ? AND window_start_us > ?
	GROUP BY window_start_us ORDER BY window_start_us DESC LIMIT 1`, []byte(key), periodUS, atUS, atUS-periodUS)
		return err
	})
	if err != nil {
		return ledger.Usage{}, err
	}
	if len(us) == 0 {
		return ledger.Usage{Key: key}, nil
	}
	return us[0], nil
}

// Report returns one page of q; see ledger.Store.
func (l *Ledger) Report(ctx context.Context, q ledger.Query) ([]ledger.Usage, error) {
	if err := q.Validate(); err != nil {
		return nil, fmt.Errorf("sqlite: Report: %w", err)
	}
	var where []string
	var args []any
	cond := func(c string, a ...any) { where = append(where, c); args = append(args, a...) }
	if !q.From.IsZero() {
		cond("window_start_us >= ?", q.From.UnixMicro())
	}
	if !q.To.IsZero() {
		cond("window_start_us < ?", q.To.UnixMicro())
	}
	if q.KeyPrefix != "" {
		cond("key >= ?", []byte(q.KeyPrefix))
		if end, ok := ledger.PrefixEnd(q.KeyPrefix); ok {
			cond("key < ?", []byte(end))
		}
	}
	if !q.Active.IsZero() {
		us := q.Active.UnixMicro()
		cond("window_start_us <= ? AND window_start_us > ? - period_us", us, us)
	}
	if a := q.After; a != nil {
		cond("(key, window_start_us, period_us) > (?, ?, ?)", []byte(a.Key), a.Window.Start.UnixMicro(), a.Window.Period.Microseconds())
	}
	query := selectUsage
	if len(where) > 0 {
		query += "\n\tWHERE " + strings.Join(where, " AND ")
	}
	query += "\n\tGROUP BY key, window_start_us, period_us ORDER BY key, window_start_us, period_us LIMIT ?"
	args = append(args, q.PageSize())
	var us []ledger.Usage
	err := l.use("Report", func() error {
		var err error
		us, err = l.query(ctx, query, args...)
		return err
	})
	return us, err
}

// query runs a selectUsage query on a reader and scans its rows.
func (l *Ledger) query(ctx context.Context, query string, args ...any) ([]ledger.Usage, error) {
	rows, err := l.read.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var us []ledger.Usage
	for rows.Next() {
		var (
			key                                []byte
			start, period, first, last, n, sum int64
			latest                             string
		)
		if err := rows.Scan(&key, &start, &period, &sum, &n, &first, &last, &latest); err != nil {
			return nil, err
		}
		u := ledger.Usage{Key: string(key), Window: ledger.Window{Start: time.UnixMicro(start).UTC(), Period: time.Duration(period) * time.Microsecond},
			Units: sum, Entries: n, First: time.UnixMicro(first).UTC(), Last: time.UnixMicro(last).UTC()}
		quota, align, ok := strings.Cut(latest, " ")
		var q int64
		if _, err := fmt.Sscan(quota, &q); !ok || err != nil {
			return nil, fmt.Errorf("%w: quota and alignment %q", floodgate.ErrUnexpectedReply, latest)
		}
		l, err := ledger.LimitOf(q, u.Window.Period, align)
		if err != nil {
			return nil, err
		}
		u.Limit = l
		us = append(us, u)
	}
	return us, rows.Err()
}

// Ping checks that the file can be read.
func (l *Ledger) Ping(ctx context.Context) error {
	return l.use("Ping", func() error {
		if err := ctx.Err(); err != nil {
			return err
		}
		var n int
		return l.read.QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_migrations`).Scan(&n)
	})
}

// Close waits for the calls in progress and closes the file. Calls after
// it return an error wrapping ledger.ErrClosed.
func (l *Ledger) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	return errors.Join(l.read.Close(), l.write.Close())
}

// Version returns the ledger's schema version: the number of migrations
// applied.
func (l *Ledger) Version(ctx context.Context) (int, error) {
	var v int
	err := l.use("Version", func() error {
		return l.read.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&v)
	})
	return v, err
}
