// Package postgres is a ledger.Store in PostgreSQL, through
// github.com/jackc/pgx/v5 and its pool: the ledger that several
// instances of a service share (floodgate serve -ledger postgres://…).
// One machine can use ledger/sqlite instead, with nothing installed.
//
// Record writes a batch in one statement, one round trip: an INSERT …
// SELECT FROM unnest(…) ON CONFLICT (key, id) DO NOTHING RETURNING key,
// id, so the primary key (key, id) is what makes each commit be written
// once, however many retries or concurrent duplicates race (the
// duplicates wait for the first insert's transaction, then do nothing).
// Usage and Report read through the index on (key, window_start,
// period_us).
//
// The schema is versioned (the table schema_migrations): Open applies the
// migrations a ledger lacks, each in its own transaction under an
// advisory lock, so that instances starting together apply each once and
// a ledger written by an older version opens in a newer one; a ledger
// written by a newer version than the code is an error. The tables live
// in the connection's search_path (the public schema by default): give a
// ledger a database, or a schema through the URL's search_path, of its
// own.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/ledger"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Options configure Open. A nil *Options, or the zero value, means every
// default.
type Options struct {
	// MaxConns is the most connections the pool opens; 0 means the URL's
	// pool_max_conns, or pgxpool's default (4, or the number of CPUs if
	// more).
	MaxConns int32
}

// Ledger is a ledger.Store in PostgreSQL. It is safe for concurrent use.
// Get one from Open.
type Ledger struct {
	pool *pgxpool.Pool

	mu     sync.RWMutex
	closed bool
}

var _ ledger.Store = (*Ledger)(nil)

// Open connects to the database at url (postgres://user:password@host:port/db?…,
// or a key=value connection string: what pgxpool.ParseConfig takes),
// checks that it answers, and brings the ledger's schema up to date.
func Open(ctx context.Context, url string, o *Options) (*Ledger, error) {
	var opts Options
	if o != nil {
		opts = *o
	}
	if opts.MaxConns < 0 {
		return nil, fmt.Errorf("postgres: Open: Options.MaxConns %d is negative", opts.MaxConns)
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// pgx's message may hold the URL, password included: say less.
		return nil, fmt.Errorf("postgres: Open: the URL does not parse (want postgres://user:password@host:port/database)")
	}
	if opts.MaxConns > 0 {
		cfg.MaxConns = opts.MaxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: Open: %w", err)
	}
	if err := migrate(ctx, pool); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: Open %s:%d/%s: %w", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database, err)
	}
	return &Ledger{pool: pool}, nil
}

// migrate applies the migrations the database lacks.
func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	for {
		done, err := migrateOne(ctx, pool)
		if err != nil || done {
			return err
		}
	}
}

// migrateOne applies the next migration, if any, in a transaction that
// holds the migration lock; done reports that there was none.
func migrateOne(ctx context.Context, pool *pgxpool.Pool) (done bool, err error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(migrationLock)); err != nil {
		return false, err
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
	version    integer     PRIMARY KEY,
	name       text        NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT now()
)`); err != nil {
		return false, fmt.Errorf("schema_migrations: %w", err)
	}
	var version int
	if err := tx.QueryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&version); err != nil {
		return false, err
	}
	switch {
	case version > len(migrations):
		return false, fmt.Errorf("the ledger's schema is version %d, written by a newer floodgate; this one knows versions up to %d", version, len(migrations))
	case version == len(migrations):
		return true, tx.Commit(ctx)
	}
	m := migrations[version]
	if _, err := tx.Exec(ctx, m.sql); err != nil {
		return false, fmt.Errorf("migration %d (%s): %w", version+1, m.name, err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)`, version+1, m.name); err != nil {
		return false, fmt.Errorf("migration %d (%s): %w", version+1, m.name, err)
	}
	return false, tx.Commit(ctx)
}

// use runs f unless the ledger is closed; Close waits for the calls in
// progress. A call whose context ended says so (errors.Is finds the
// context's error) even where pgx's error does not.
func (l *Ledger) use(ctx context.Context, op string, f func() error) error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return fmt.Errorf("postgres: %s: %w", op, ledger.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("postgres: %s: %w", op, err)
	}
	if err := f(); err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
			return fmt.Errorf("postgres: %s: %w (%v)", op, ctxErr, err)
		}
		return fmt.Errorf("postgres: %s: %w", op, err)
	}
	return nil
}

const insertEntries = `INSERT INTO ledger_entries
	(key, id, algorithm, quota, period_us, alignment, window_start, units, committed_at)
SELECT * FROM unnest($1::bytea[], $2::text[], $3::text[], $4::int8[], $5::int8[], $6::text[], $7::timestamptz[], $8::int8[], $9::timestamptz[])
ON CONFLICT (key, id) DO NOTHING
RETURNING key, id`

// Record writes the entries the ledger lacks in one statement; see
// ledger.Store.
func (l *Ledger) Record(ctx context.Context, entries []ledger.Entry) ([]bool, error) {
	if err := ledger.Check(entries); err != nil {
		return nil, fmt.Errorf("postgres: Record: %w", err)
	}
	n := len(entries)
	var (
		keys                   = make([][]byte, n)
		ids, algs, aligns      = make([]string, n), make([]string, n), make([]string, n)
		quotas, periods, units = make([]int64, n), make([]int64, n), make([]int64, n)
		windows, ats           = make([]time.Time, n), make([]time.Time, n)
		index                  = make(map[string]int, n)
		written                = make([]bool, n)
	)
	for i := range entries {
		e := &entries[i]
		keys[i], ids[i], algs[i], aligns[i] = []byte(e.Key), e.ID, string(e.Limit.EffectiveAlgorithm()), ledger.Alignment(e.Limit)
		quotas[i], periods[i], units[i] = e.Limit.Limit, e.Period().Microseconds(), e.Units
		windows[i], ats[i] = e.Window, e.At.Truncate(time.Microsecond)
		index[keyID(e.Key, e.ID)] = i
	}
	err := l.use(ctx, "Record", func() error {
		if n == 0 {
			return nil
		}
		rows, err := l.pool.Query(ctx, insertEntries, keys, ids, algs, quotas, periods, aligns, windows, units, ats)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var key []byte
			var id string
			if err := rows.Scan(&key, &id); err != nil {
				return err
			}
			i, ok := index[keyID(string(key), id)]
			if !ok {
				return fmt.Errorf("%w: the insert returned (key %q, id %q), which the batch does not hold", floodgate.ErrUnexpectedReply, key, id)
			}
			written[i] = true
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return written, nil
}

// keyID joins a key and an ID into a map key: an ID holds no NUL byte.
func keyID(key, id string) string { return id + "\x00" + key }

// selectUsage is the columns of a Usage, grouped by window; the latest
// entry (by committed_at, then id) gives the window's quota.
const selectUsage = `SELECT key, window_start, period_us, sum(units)::int8, count(*), min(committed_at), max(committed_at),
	(array_agg(quota ORDER BY committed_at DESC, id DESC))[1], (array_agg(alignment ORDER BY committed_at DESC, id DESC))[1]
FROM ledger_entries`

// Usage returns the units of key's window of period that contains at;
// see ledger.Store.
func (l *Ledger) Usage(ctx context.Context, key string, period time.Duration, at time.Time) (ledger.Usage, error) {
	if err := ledger.CheckUsage(key, period, at); err != nil {
		return ledger.Usage{}, fmt.Errorf("postgres: Usage: %w", err)
	}
	at = at.Truncate(time.Microsecond)
	var us []ledger.Usage
	err := l.use(ctx, "Usage", func() error {
		var err error
		us, err = l.query(ctx, selectUsage+`
WHERE key = $1 AND period_us = $2 AND window_start <= $3 AND window_start > $4
GROUP BY key, window_start, period_us ORDER BY window_start DESC LIMIT 1`, []byte(key), period.Microseconds(), at, at.Add(-period))
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
		return nil, fmt.Errorf("postgres: Report: %w", err)
	}
	var where []string
	var args []any
	arg := func(a any) string { args = append(args, a); return fmt.Sprintf("$%d", len(args)) }
	if !q.From.IsZero() {
		where = append(where, "window_start >= "+arg(q.From))
	}
	if !q.To.IsZero() {
		where = append(where, "window_start < "+arg(q.To))
	}
	if q.KeyPrefix != "" {
		where = append(where, "key >= "+arg([]byte(q.KeyPrefix)))
		if end, ok := ledger.PrefixEnd(q.KeyPrefix); ok {
			where = append(where, "key < "+arg([]byte(end)))
		}
	}
	if !q.Active.IsZero() {
		a := arg(q.Active.Truncate(time.Microsecond))
		where = append(where, "window_start <= "+a, "window_start + period_us * interval '1 microsecond' > "+a)
	}
	if a := q.After; a != nil {
		where = append(where, fmt.Sprintf("(key, window_start, period_us) > (%s, %s, %s)",
			arg([]byte(a.Key)), arg(a.Window.Start), arg(a.Window.Period.Microseconds())))
	}
	query := selectUsage
	if len(where) > 0 {
		query += "\nWHERE " + strings.Join(where, " AND ")
	}
	query += "\nGROUP BY key, window_start, period_us ORDER BY key, window_start, period_us LIMIT " + arg(q.PageSize())
	var us []ledger.Usage
	err := l.use(ctx, "Report", func() error {
		var err error
		us, err = l.query(ctx, query, args...)
		return err
	})
	return us, err
}

// query runs a selectUsage query and scans its rows.
func (l *Ledger) query(ctx context.Context, query string, args ...any) ([]ledger.Usage, error) {
	rows, err := l.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (ledger.Usage, error) {
		var (
			key                  []byte
			start, first, last   time.Time
			period, sum, n, quot int64
			align                string
		)
		if err := row.Scan(&key, &start, &period, &sum, &n, &first, &last, &quot, &align); err != nil {
			return ledger.Usage{}, err
		}
		p := time.Duration(period) * time.Microsecond
		l, err := ledger.LimitOf(quot, p, align)
		if err != nil {
			return ledger.Usage{}, err
		}
		return ledger.Usage{Key: string(key),
			Limit:  l,
			Window: ledger.Window{Start: start.UTC(), Period: p},
			Units:  sum, Entries: n, First: first.UTC(), Last: last.UTC()}, nil
	})
}

// Ping checks that the database answers.
func (l *Ledger) Ping(ctx context.Context) error {
	return l.use(ctx, "Ping", func() error { return l.pool.Ping(ctx) })
}

// Close waits for the calls in progress and closes the pool. Calls after
// it return an error wrapping ledger.ErrClosed.
func (l *Ledger) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.closed = true
		l.pool.Close()
	}
	return nil
}

// Version returns the ledger's schema version: the number of migrations
// applied.
func (l *Ledger) Version(ctx context.Context) (int, error) {
	var v int
	err := l.use(ctx, "Version", func() error {
		return l.pool.QueryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&v)
	})
	return v, err
}
