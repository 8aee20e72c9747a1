package ledger

import (
	"context"
	"time"
)

// OverrideStore keeps the overrides of a service's limits (a key's or a
// tenant's plan, set through `floodgate serve`'s admin API) and the audit
// of their changes, in the ledger's database, so that every instance
// reads the same overrides and a restart keeps them. The ledger stores of
// ledger/postgres and ledger/sqlite implement it. A document (Doc) is
// opaque here: the server encodes and checks it.
//
// Every change bumps one version counter and appends one audit row, in
// the transaction that changes the override; changes are serialized, so
// versions are committed in order and a reader that saw version v and
// reads OverrideVersion again sees every change after v once it sees a
// larger number. Every method is safe for concurrent use.
type OverrideStore interface {
	// SetOverride makes c.New the document of c.Subject (c.New nil
	// removes it), as c.By at c.At, and returns the change as recorded:
	// its Version, the new version of the store, and Old, the document
	// it replaced (nil for none). changed is false, and nothing is
	// written, when c.New is nil and the subject has no override.
	SetOverride(ctx context.Context, c OverrideChange) (recorded OverrideChange, changed bool, err error)
	// Overrides returns every override, ordered by subject, and the
	// version they are at, read together.
	Overrides(ctx context.Context) (version int64, overrides []Override, err error)
	// OverrideVersion returns the version of the overrides: 0 before the
	// first change; it only grows.
	OverrideVersion(ctx context.Context) (int64, error)
	// OverrideAudit returns changes newest first: at most q.Size() of
	// them, of q.Subject only if set, with versions below q.Before if
	// it is above 0.
	OverrideAudit(ctx context.Context, q AuditQuery) ([]OverrideChange, error)
}

// Override is one subject's override in force.
type Override struct {
	// Subject is what the override applies to: the server's store key of
	// a descriptor ("d|api|tenant=acme").
	Subject string
	// Doc is the override, as the server encoded it.
	Doc []byte
	// Version is the version of its last change; By and At who made it
	// and when.
	Version int64
	By      string
	At      time.Time
}

// OverrideChange is one change of an override, as the audit keeps it.
type OverrideChange struct {
	// Version is the store's version after the change.
	Version int64
	Subject string
	// Old and New are the documents before and after; nil for none (New
	// nil: the override was removed).
	Old, New []byte
	// By is the identity of who made the change (the token's identity of
	// the admin API); At is when, to the microsecond.
	By string
	At time.Time
}

// AuditQuery selects changes of OverrideStore.OverrideAudit.
type AuditQuery struct {
	// Subject, if set, selects that subject's changes only.
	Subject string
	// Before, if above 0, selects versions below it: the Version of the
	// last change of the previous page.
	Before int64
	// Limit is the page size; see Size.
	Limit int
}

// MaxAuditPage is the largest page of OverrideAudit.
const MaxAuditPage = 1000

// Size is the page size of q: Limit, or 100 when it is 0 or less, and at
// most MaxAuditPage.
func (q AuditQuery) Size() int {
	switch {
	case q.Limit <= 0:
		return 100
	case q.Limit > MaxAuditPage:
		return MaxAuditPage
	}
	return q.Limit
}
