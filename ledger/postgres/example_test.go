package postgres_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/ledger"
	"github.com/floodgate-rl/floodgate/ledger/postgres"
)

// Several instances share one ledger in PostgreSQL; each records the
// commits it makes, and a commit two instances both send is written once.
// (This example needs a server, so it is compiled, not run; the package's
// tests run the same on a real one.)
func ExampleOpen() {
	ctx := context.Background()
	l, err := postgres.Open(ctx, "postgres://floodgate:secret@db.internal:5432/floodgate", &postgres.Options{MaxConns: 8})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close()
	daily := floodgate.Limit{Limit: 1000, Period: 24 * time.Hour}
	now := time.Now()
	written, err := l.Record(ctx, []ledger.Entry{{Key: "tenant:acme", Limit: daily, Window: ledger.WindowAt(daily.Period, now).Start,
		Units: 12, ID: "res-7f3a", At: now}})
	fmt.Println(written, err)
}
