package postgres_test

import (
	"testing"

	"github.com/floodgate-rl/floodgate/internal/pgtest"
	"github.com/floodgate-rl/floodgate/ledger"
	"github.com/floodgate-rl/floodgate/ledger/ledgertest"
	"github.com/floodgate-rl/floodgate/ledger/postgres"
)

// BenchmarkLedger runs ledgertest.Benchmark on a local PostgreSQL over
// TCP loopback: fsync=off is the shared test server (fsync,
// synchronous_commit and full_page_writes off: the cost of the round
// trips and the statements alone), fsync=on a server of its own with
// PostgreSQL's defaults, where every commit waits for its WAL flush.
func BenchmarkLedger(b *testing.B) {
	for _, fsync := range []string{"off", "on"} {
		b.Run("store=postgres/fsync="+fsync, func(b *testing.B) {
			var server *pgtest.Server
			if fsync == "on" {
				server = pgtest.Start(b, &pgtest.Options{Fsync: true})
			} else {
				server = pgtest.Shared(b)
			}
			ledgertest.Benchmark(b, func(b *testing.B) ledger.Store {
				l, err := postgres.Open(b.Context(), server.NewDatabase(b), nil)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { l.Close() })
				return l
			})
		})
	}
}

// BenchmarkDurable runs ledgertest.BenchmarkDurable on the two servers of
// BenchmarkLedger, with as many writes at once as pgxpool has
// connections by default (4 here).
func BenchmarkDurable(b *testing.B) {
	for _, fsync := range []string{"off", "on"} {
		b.Run("store=postgres/fsync="+fsync, func(b *testing.B) {
			var server *pgtest.Server
			if fsync == "on" {
				server = pgtest.Start(b, &pgtest.Options{Fsync: true})
			} else {
				server = pgtest.Shared(b)
			}
			ledgertest.BenchmarkDurable(b, func(b *testing.B) ledger.Store {
				l, err := postgres.Open(b.Context(), server.NewDatabase(b), nil)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { l.Close() })
				return l
			}, &ledger.DurableOptions{MaxWrites: 4})
		})
	}
}
