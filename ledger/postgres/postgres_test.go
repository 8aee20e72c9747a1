package postgres_test

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/pgtest"
	"github.com/floodgate-rl/floodgate/ledger"
	"github.com/floodgate-rl/floodgate/ledger/ledgertest"
	"github.com/floodgate-rl/floodgate/ledger/postgres"
	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

func TestConformance(t *testing.T) {
	ledgertest.Run(t, func(t *testing.T) ledgertest.Opener {
		url := pgtest.Database(t)
		return func(ctx context.Context) (ledger.Store, error) {
			return postgres.Open(ctx, url, nil)
		}
	})
}

func exec(t *testing.T, url string, sql string, args ...any) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(t.Context(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// v1 is the schema of version 1, as the first version wrote it: a test
// of the upgrade must not read it from the code it tests.
const v1 = `
CREATE TABLE schema_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE ledger_entries (
	key          bytea       NOT NULL,
	id           text        NOT NULL,
	algorithm    text        NOT NULL,
	quota        bigint      NOT NULL,
	period_us    bigint      NOT NULL CHECK (period_us > 0),
	alignment    text        NOT NULL,
	window_start timestamptz NOT NULL,
	units        bigint      NOT NULL CHECK (units >= 0),
	committed_at timestamptz NOT NULL,
	PRIMARY KEY (key, id)
);
INSERT INTO schema_migrations (version, name) VALUES (1, 'entries');
`

// TestUpgradeFromV1 writes a ledger with the schema of version 1 and
// entries in it, then opens it with this code: the migrations run, the
// entries are there, and a retried entry is still not written twice.
func TestUpgradeFromV1(t *testing.T) {
	url := pgtest.Database(t)
	exec(t, url, v1)
	start := time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)
	for i, units := range []int64{3, 4} {
		exec(t, url, `INSERT INTO ledger_entries VALUES ($1, $2, 'fixed_window', 100, 3600000000, 'aligned', $3, $4, $5)`,
			[]byte("acme"), []string{"r1", "r2"}[i], start, units, start.Add(time.Minute))
	}
	l, err := postgres.Open(t.Context(), url, nil)
	if err != nil {
		t.Fatalf("open a v1 ledger: %v", err)
	}
	defer l.Close()
	if v, err := l.Version(t.Context()); err != nil || v != 3 {
		t.Errorf("Version after opening a v1 ledger = %d, %v; want 3", v, err)
	}
	u, err := l.Usage(t.Context(), "acme", time.Hour, start.Add(30*time.Minute))
	if err != nil || u.Units != 7 || u.Entries != 2 || u.Limit.Limit != 100 {
		t.Errorf("Usage of the v1 entries = %+v, %v; want 7 units in 2 entries of a limit of 100", u, err)
	}
	written, err := l.Record(t.Context(), []ledger.Entry{{Key: "acme", Limit: floodgate.Limit{Limit: 100, Period: time.Hour},
		Window: start, Units: 3, ID: "r1", At: start.Add(time.Minute)}})
	if err != nil || !slices.Equal(written, []bool{false}) {
		t.Errorf("Record of a v1 entry again = %v, %v; want [false]", written, err)
	}
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM pg_indexes WHERE indexname = 'ledger_entries_window'`).Scan(&n); err != nil || n != 1 {
		t.Errorf("index ledger_entries_window: %d, %v; want it", n, err)
	}
}

// TestNewerSchema: a ledger written by a newer version than the code is
// an error, not a guess.
func TestNewerSchema(t *testing.T) {
	url := pgtest.Database(t)
	l, err := postgres.Open(t.Context(), url, nil)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	exec(t, url, `INSERT INTO schema_migrations (version, name) VALUES (99, 'future')`)
	if l, err := postgres.Open(t.Context(), url, nil); err == nil {
		l.Close()
		t.Fatal("Open of a ledger of schema version 99: no error")
	} else if !strings.Contains(err.Error(), "version 99") {
		t.Errorf("Open of a ledger of schema version 99: %v", err)
	}
}

// TestConcurrentOpen: instances opening one new database at once apply
// each migration once.
func TestConcurrentOpen(t *testing.T) {
	url := pgtest.Database(t)
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			l, err := postgres.Open(t.Context(), url, nil)
			if err == nil {
				err = l.Close()
			}
			errs <- err
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	l, err := postgres.Open(t.Context(), url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if v, err := l.Version(t.Context()); err != nil || v != 3 {
		t.Errorf("Version = %d, %v; want 3", v, err)
	}
}

// TestOpenErrors: a bad URL says so without repeating it (it may hold a
// password); an unreachable server is an error.
func TestOpenErrors(t *testing.T) {
	if _, err := postgres.Open(t.Context(), "postgres://u:s3cret@127.0.0.1:notaport/db", nil); err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("Open of a bad URL: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := postgres.Open(ctx, "postgres://u:s3cret@127.0.0.1:1/db?connect_timeout=2", nil); err == nil {
		t.Error("Open of a server that is not there: no error")
	} else if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("the error shows the password: %v", err)
	}
	if _, err := postgres.Open(t.Context(), pgtest.Database(t), &postgres.Options{MaxConns: -1}); err == nil {
		t.Error("Open with MaxConns -1: no error")
	}
}

func TestOverridesConformance(t *testing.T) {
	ledgertest.RunOverrides(t, func(t *testing.T) ledgertest.Opener {
		url := pgtest.Database(t)
		return func(ctx context.Context) (ledger.Store, error) {
			return postgres.Open(ctx, url, nil)
		}
	})
}
