package sqlite_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/ledger"
	"github.com/floodgate-rl/floodgate/ledger/sqlite"
)

// A ledger in a file: what was recorded is there after reopening it.
func ExampleOpen() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "sqlite-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "ledger.db")

	l, err := sqlite.Open(ctx, path, nil)
	if err != nil {
		panic(err)
	}
	hourly := floodgate.Limit{Limit: 100, Period: time.Hour}
	at := time.Date(2026, 1, 5, 10, 30, 0, 0, time.UTC)
	written, err := l.Record(ctx, []ledger.Entry{{Key: "tenant:acme", Limit: hourly, Window: ledger.WindowAt(hourly.Period, at).Start, Units: 42, ID: "r1", At: at}})
	fmt.Println(written, err)
	l.Close()

	l, err = sqlite.Open(ctx, path, nil)
	if err != nil {
		panic(err)
	}
	defer l.Close()
	u, err := l.Usage(ctx, "tenant:acme", time.Hour, at)
	fmt.Println(u.Units, u.Entries, err)
	// Output:
	// [true] <nil>
	// 42 1 <nil>
}
