package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/floodgate-rl/floodgate/ledger"
	"github.com/jackc/pgx/v5"
)

var _ ledger.OverrideStore = (*Ledger)(nil)

// SetOverride changes one override and records the change; see
// ledger.OverrideStore. The version row's lock, taken first, serializes
// changes, so versions commit in order and each change's old value is the
// one the change before it left.
func (l *Ledger) SetOverride(ctx context.Context, c ledger.OverrideChange) (ledger.OverrideChange, bool, error) {
	changed := false
	c.At = c.At.Truncate(time.Microsecond)
	err := l.use(ctx, "SetOverride", func() error {
		return pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
			// The version row's lock first: a subject's row may not exist
			// yet, and FOR UPDATE on no row locks nothing, so two first
			// changes of one subject would both read "no old". Under the
			// lock, READ COMMITTED's next statement sees every change
			// that held it before.
			var version int64
			if err := tx.QueryRow(ctx, `SELECT version FROM ledger_override_version WHERE id = 1 FOR UPDATE`).Scan(&version); err != nil {
				return err
			}
			var old []byte
			err := tx.QueryRow(ctx, `SELECT doc FROM ledger_overrides WHERE subject = $1`, []byte(c.Subject)).Scan(&old)
			switch {
			case errors.Is(err, pgx.ErrNoRows):
				old = nil
			case err != nil:
				return err
			}
			if c.New == nil && old == nil {
				return nil
			}
			if err := tx.QueryRow(ctx, `UPDATE ledger_override_version SET version = version + 1 WHERE id = 1 RETURNING version`).Scan(&c.Version); err != nil {
				return err
			}
			c.Old = old
			if c.New == nil {
				_, err = tx.Exec(ctx, `DELETE FROM ledger_overrides WHERE subject = $1`, []byte(c.Subject))
			} else {
				_, err = tx.Exec(ctx, `INSERT INTO ledger_overrides (subject, doc, version, changed_by, changed_at) VALUES ($1, $2, $3, $4, $5)
	ON CONFLICT (subject) DO UPDATE SET doc = EXCLUDED.doc, version = EXCLUDED.version, changed_by = EXCLUDED.changed_by, changed_at = EXCLUDED.changed_at`,
					[]byte(c.Subject), c.New, c.Version, c.By, c.At)
			}
			if err != nil {
				return err
			}
			_, err = tx.Exec(ctx, `INSERT INTO ledger_override_audit (version, subject, old_doc, new_doc, changed_by, changed_at) VALUES ($1, $2, $3, $4, $5, $6)`,
				c.Version, []byte(c.Subject), c.Old, c.New, c.By, c.At)
			changed = err == nil
			return err
		})
	})
	if err != nil || !changed {
		return ledger.OverrideChange{}, false, err
	}
	return c, true, nil
}

// Overrides returns every override and their version, read in one
// REPEATABLE READ transaction; see ledger.OverrideStore.
func (l *Ledger) Overrides(ctx context.Context) (int64, []ledger.Override, error) {
	var (
		version int64
		out     []ledger.Override
	)
	err := l.use(ctx, "Overrides", func() error {
		out = nil
		return pgx.BeginTxFunc(ctx, l.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
			if err := tx.QueryRow(ctx, `SELECT version FROM ledger_override_version WHERE id = 1`).Scan(&version); err != nil {
				return err
			}
			rows, err := tx.Query(ctx, `SELECT subject, doc, version, changed_by, changed_at FROM ledger_overrides ORDER BY subject`)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var o ledger.Override
				var subject []byte
				if err := rows.Scan(&subject, &o.Doc, &o.Version, &o.By, &o.At); err != nil {
					return err
				}
				o.Subject, o.At = string(subject), o.At.UTC()
				out = append(out, o)
			}
			return rows.Err()
		})
	})
	if err != nil {
		return 0, nil, err
	}
	return version, out, nil
}

// OverrideVersion returns the overrides' version; see ledger.OverrideStore.
func (l *Ledger) OverrideVersion(ctx context.Context) (int64, error) {
	var v int64
	err := l.use(ctx, "OverrideVersion", func() error {
		return l.pool.QueryRow(ctx, `SELECT version FROM ledger_override_version WHERE id = 1`).Scan(&v)
	})
	return v, err
}

// OverrideAudit returns changes newest first; see ledger.OverrideStore.
func (l *Ledger) OverrideAudit(ctx context.Context, q ledger.AuditQuery) ([]ledger.OverrideChange, error) {
	var out []ledger.OverrideChange
	err := l.use(ctx, "OverrideAudit", func() error {
		out = nil
		rows, err := l.pool.Query(ctx, `SELECT version, subject, old_doc, new_doc, changed_by, changed_at FROM ledger_override_audit
	WHERE ($1::bytea IS NULL OR subject = $1) AND ($2::bigint <= 0 OR version < $2)
	ORDER BY version DESC LIMIT $3`, subjectArg(q.Subject), q.Before, q.Size())
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var c ledger.OverrideChange
			var subject []byte
			if err := rows.Scan(&c.Version, &subject, &c.Old, &c.New, &c.By, &c.At); err != nil {
				return err
			}
			c.Subject, c.At = string(subject), c.At.UTC()
			out = append(out, c)
		}
		return rows.Err()
	})
	return out, err
}

// subjectArg is a subject as a query argument: NULL for none.
func subjectArg(s string) []byte {
	if s == "" {
		return nil
	}
	return []byte(s)
}
