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
	onServers(b, func(b *testing.B, newLedger func(*testing.B) ledger.Store) {
		ledgertest.Benchmark(b, newLedger)
	})
}

// BenchmarkDurable runs ledgertest.BenchmarkDurable on the two servers of
// BenchmarkLedger, with as many writes at once as pgxpool has
// connections by default (4 here).
func BenchmarkDurable(b *testing.B) {
	onServers(b, func(b *testing.B, newLedger func(*testing.B) ledger.Store) {
		ledgertest.BenchmarkDurable(b, newLedger, &ledger.DurableOptions{MaxWrites: 4})
	})
}

// onServers runs f as store=postgres/fsync=off on the shared test server
// and as store=postgres/fsync=on on a server of its own with PostgreSQL's
// defaults, giving it a func that opens a ledger on a new database.
func onServers(b *testing.B, f func(b *testing.B, newLedger func(*testing.B) ledger.Store)) {
	for _, fsync := range []string{"off", "on"} {
		b.Run("store=postgres/fsync="+fsync, func(b *testing.B) {
			var server *pgtest.Server
			if fsync == "on" {
				server = pgtest.Start(b, &pgtest.Options{Fsync: true})
			} else {
				server = pgtest.Shared(b)
			}
			f(b, func(b *testing.B) ledger.Store {
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
