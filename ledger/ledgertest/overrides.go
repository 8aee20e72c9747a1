package ledgertest

import (
	"bytes"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/ledger"
)

// RunOverrides is the conformance suite of a ledger.OverrideStore: the
// ledger that newPlace's Opener opens must implement it. It checks the
// version counter, the old and new documents of each change, removal,
// the audit's order, filter and pages, that a reopened ledger keeps
// everything (a restart), and that concurrent changes get distinct
// versions, each in the audit once.
func RunOverrides(t *testing.T, newPlace func(t *testing.T) Opener) {
	at := time.Date(2026, 12, 1, 5, 0, 0, 123456000, time.UTC)
	open := func(t *testing.T, o Opener) (ledger.Store, ledger.OverrideStore) {
		t.Helper()
		s, err := o(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		ovs, ok := s.(ledger.OverrideStore)
		if !ok {
			s.Close()
			t.Fatalf("%T is no ledger.OverrideStore", s)
		}
		return s, ovs
	}
	t.Run("changes", func(t *testing.T) {
		o := newPlace(t)
		s, ovs := open(t, o)
		ctx := t.Context()
		if v, err := ovs.OverrideVersion(ctx); err != nil || v != 0 {
			t.Fatalf("version of a new ledger = %d, %v; want 0", v, err)
		}
		set := func(subject, doc, by string) ledger.OverrideChange {
			t.Helper()
			var d []byte
			if doc != "" {
				d = []byte(doc)
			}
			c, changed, err := ovs.SetOverride(ctx, ledger.OverrideChange{Subject: subject, New: d, By: by, At: at})
			if err != nil || !changed {
				t.Fatalf("SetOverride(%s, %s) = %v, %v", subject, doc, changed, err)
			}
			return c
		}
		c1 := set("d|api|tenant=acme", `{"plan":"free"}`, "alice")
		if c1.Version != 1 || c1.Old != nil || string(c1.New) != `{"plan":"free"}` || !c1.At.Equal(at) {
			t.Errorf("first change %+v", c1)
		}
		c2 := set("d|api|tenant=acme", `{"plan":"pro"}`, "bob")
		if c2.Version != 2 || string(c2.Old) != `{"plan":"free"}` {
			t.Errorf("second change %+v", c2)
		}
		set("d|api|tenant=zeta", `{"plan":"free"}`, "alice")
		c4 := set("d|api|tenant=zeta", "", "carol")
		if c4.Version != 4 || string(c4.Old) != `{"plan":"free"}` || c4.New != nil {
			t.Errorf("removal %+v", c4)
		}
		if _, changed, err := ovs.SetOverride(ctx, ledger.OverrideChange{Subject: "d|api|tenant=zeta", By: "carol", At: at}); err != nil || changed {
			t.Errorf("removing what is not there: changed %v, %v", changed, err)
		}
		v, all, err := ovs.Overrides(ctx)
		if err != nil || v != 4 || len(all) != 1 || all[0].Subject != "d|api|tenant=acme" || string(all[0].Doc) != `{"plan":"pro"}` ||
			all[0].Version != 2 || all[0].By != "bob" || !all[0].At.Equal(at) {
			t.Fatalf("Overrides = %d, %+v, %v", v, all, err)
		}
		audit, err := ovs.OverrideAudit(ctx, ledger.AuditQuery{})
		if err != nil || len(audit) != 4 {
			t.Fatalf("audit = %+v, %v", audit, err)
		}
		for i, c := range audit {
			if c.Version != int64(4-i) {
				t.Errorf("audit[%d] is version %d, want %d (newest first)", i, c.Version, 4-i)
			}
		}
		if audit[2].By != "bob" || string(audit[2].Old) != `{"plan":"free"}` || string(audit[2].New) != `{"plan":"pro"}` {
			t.Errorf("audit of version 2 = %+v", audit[2])
		}
		mine, err := ovs.OverrideAudit(ctx, ledger.AuditQuery{Subject: "d|api|tenant=zeta"})
		if err != nil || len(mine) != 2 || mine[0].Version != 4 || mine[1].Version != 3 {
			t.Errorf("audit of one subject = %+v, %v", mine, err)
		}
		page, err := ovs.OverrideAudit(ctx, ledger.AuditQuery{Before: 3, Limit: 1})
		if err != nil || len(page) != 1 || page[0].Version != 2 {
			t.Errorf("page before 3 of 1 = %+v, %v", page, err)
		}
		// A restart keeps the overrides, their version and the audit.
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s2, os2 := open(t, o)
		defer s2.Close()
		v2, again, err := os2.Overrides(ctx)
		if err != nil || v2 != 4 || len(again) != 1 || !bytes.Equal(again[0].Doc, all[0].Doc) {
			t.Errorf("after reopening: %d, %+v, %v", v2, again, err)
		}
		if audit2, err := os2.OverrideAudit(ctx, ledger.AuditQuery{}); err != nil || len(audit2) != 4 {
			t.Errorf("audit after reopening: %d changes, %v", len(audit2), err)
		}
	})
	t.Run("concurrent", func(t *testing.T) {
		s, ovs := open(t, newPlace(t))
		defer s.Close()
		ctx := t.Context()
		const n = 10
		var wg sync.WaitGroup
		versions := make([]int64, n)
		errs := make([]error, n)
		for i := range n {
			wg.Go(func() {
				c, _, err := ovs.SetOverride(ctx, ledger.OverrideChange{Subject: fmt.Sprintf("d|api|tenant=%d", i%3),
					New: []byte(fmt.Sprintf(`{"n":%d}`, i)), By: "x", At: at})
				versions[i], errs[i] = c.Version, err
			})
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		slices.Sort(versions)
		for i, v := range versions {
			if v != int64(i+1) {
				t.Fatalf("versions %v, want 1 to %d each once", versions, n)
			}
		}
		audit, err := ovs.OverrideAudit(ctx, ledger.AuditQuery{})
		if err != nil || len(audit) != n {
			t.Fatalf("audit has %d changes, %v; want %d", len(audit), err, n)
		}
		// Each subject's audit chains: the Old of a change is the New of
		// the change before it.
		last := map[string][]byte{}
		for i := len(audit) - 1; i >= 0; i-- {
			c := audit[i]
			if !bytes.Equal(c.Old, last[c.Subject]) {
				t.Errorf("version %d of %s: old %s, want %s", c.Version, c.Subject, c.Old, last[c.Subject])
			}
			last[c.Subject] = c.New
		}
	})
}
