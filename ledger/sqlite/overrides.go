package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/floodgate-rl/floodgate/ledger"
)

var _ ledger.OverrideStore = (*Ledger)(nil)

// SetOverride changes one override and records the change, in one
// transaction of the one writer; see ledger.OverrideStore.
func (l *Ledger) SetOverride(ctx context.Context, c ledger.OverrideChange) (ledger.OverrideChange, bool, error) {
	changed := false
	err := l.use("SetOverride", func() error {
		tx, err := l.write.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		var old []byte
		err = tx.QueryRowContext(ctx, `SELECT doc FROM ledger_overrides WHERE subject = ?`, []byte(c.Subject)).Scan(&old)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			old = nil
		case err != nil:
			return err
		}
		if c.New == nil && old == nil {
			return nil
		}
		if err := tx.QueryRowContext(ctx, `UPDATE ledger_override_version SET version = version + 1 WHERE id = 1 RETURNING version`).Scan(&c.Version); err != nil {
			return err
		}
		c.Old = old
		at := c.At.UnixMicro()
		if c.New == nil {
			_, err = tx.ExecContext(ctx, `DELETE FROM ledger_overrides WHERE subject = ?`, []byte(c.Subject))
		} else {
			_, err = tx.ExecContext(ctx, `INSERT INTO ledger_overrides (subject, doc, version, changed_by, changed_at_us) VALUES (?, ?, ?, ?, ?)
	ON CONFLICT (subject) DO UPDATE SET doc = excluded.doc, version = excluded.version, changed_by = excluded.changed_by, changed_at_us = excluded.changed_at_us`,
				[]byte(c.Subject), c.New, c.Version, c.By, at)
		}
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO ledger_override_audit (version, subject, old_doc, new_doc, changed_by, changed_at_us) VALUES (?, ?, ?, ?, ?, ?)`,
			c.Version, []byte(c.Subject), c.Old, c.New, c.By, at); err != nil {
			return err
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		changed = true
		return nil
	})
	if err != nil || !changed {
		return ledger.OverrideChange{}, false, err
	}
	c.At = time.UnixMicro(c.At.UnixMicro()).UTC()
	return c, true, nil
}

// Overrides returns every override and their version, read in one
// transaction; see ledger.OverrideStore.
func (l *Ledger) Overrides(ctx context.Context) (int64, []ledger.Override, error) {
	var (
		version int64
		out     []ledger.Override
	)
	err := l.use("Overrides", func() error {
		out = nil
		tx, err := l.read.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := tx.QueryRowContext(ctx, `SELECT version FROM ledger_override_version WHERE id = 1`).Scan(&version); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, `SELECT subject, doc, version, changed_by, changed_at_us FROM ledger_overrides ORDER BY subject`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var o ledger.Override
			var subject []byte
			var at int64
			if err := rows.Scan(&subject, &o.Doc, &o.Version, &o.By, &at); err != nil {
				return err
			}
			o.Subject, o.At = string(subject), time.UnixMicro(at).UTC()
			out = append(out, o)
		}
		return rows.Err()
	})
	if err != nil {
		return 0, nil, err
	}
	return version, out, nil
}

// OverrideVersion returns the overrides' version; see ledger.OverrideStore.
func (l *Ledger) OverrideVersion(ctx context.Context) (int64, error) {
	var v int64
	err := l.use("OverrideVersion", func() error {
		return l.read.QueryRowContext(ctx, `SELECT version FROM ledger_override_version WHERE id = 1`).Scan(&v)
	})
	return v, err
}

// OverrideAudit returns changes newest first; see ledger.OverrideStore.
func (l *Ledger) OverrideAudit(ctx context.Context, q ledger.AuditQuery) ([]ledger.OverrideChange, error) {
	var out []ledger.OverrideChange
	err := l.use("OverrideAudit", func() error {
		out = nil
		var subject any
		if q.Subject != "" {
			subject = []byte(q.Subject)
		}
		rows, err := l.read.QueryContext(ctx, `SELECT version, subject, old_doc, new_doc, changed_by, changed_at_us FROM ledger_override_audit
	WHERE (?1 IS NULL OR subject = ?1) AND (?2 <= 0 OR version < ?2)
	ORDER BY version DESC LIMIT ?3`, subject, q.Before, q.Size())
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var c ledger.OverrideChange
			var s []byte
			var at int64
			if err := rows.Scan(&c.Version, &s, &c.Old, &c.New, &c.By, &at); err != nil {
				return err
			}
			c.Subject, c.At = string(s), time.UnixMicro(at).UTC()
			out = append(out, c)
		}
		return rows.Err()
	})
	return out, err
}
