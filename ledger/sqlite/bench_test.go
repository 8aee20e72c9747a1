package sqlite_test

import (
	"path/filepath"
	"testing"

	"github.com/floodgate-rl/floodgate/ledger"
	"github.com/floodgate-rl/floodgate/ledger/ledgertest"
	"github.com/floodgate-rl/floodgate/ledger/sqlite"
)

// BenchmarkLedger runs ledgertest.Benchmark on a file in a temporary
// directory, synchronous=FULL as Open sets it: every Record waits for its
// write to reach the disk.
func BenchmarkLedger(b *testing.B) {
	b.Run("store=sqlite", func(b *testing.B) {
		ledgertest.Benchmark(b, func(b *testing.B) ledger.Store {
			l, err := sqlite.Open(b.Context(), filepath.Join(b.TempDir(), "ledger.db"), nil)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { l.Close() })
			return l
		})
	})
}

// BenchmarkDurable runs ledgertest.BenchmarkDurable on a file in a
// temporary directory: a durable commit's cost through a Limiter.
func BenchmarkDurable(b *testing.B) {
	ledgertest.BenchmarkDurable(b, func(b *testing.B) ledger.Store {
		l, err := sqlite.Open(b.Context(), filepath.Join(b.TempDir(), "ledger.db"), nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { l.Close() })
		return l
	}, nil)
}
