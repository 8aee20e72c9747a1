package sqlite_test

import (
	"context"
	"database/sql"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/ledger"
	"github.com/floodgate-rl/floodgate/ledger/ledgertest"
	"github.com/floodgate-rl/floodgate/ledger/sqlite"
	_ "modernc.org/sqlite"
)

func TestConformance(t *testing.T) {
	ledgertest.Run(t, func(t *testing.T) ledgertest.Opener {
		path := filepath.Join(t.TempDir(), "ledger.db")
		return func(ctx context.Context) (ledger.Store, error) {
			return sqlite.Open(ctx, path, nil)
		}
	})
}

// TestPathWithURICharacters: a file name is a name, '?', '#' and '%'
// included.
func TestPathWithURICharacters(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a?b#c%20d.db")
	l, err := sqlite.Open(t.Context(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := os.Stat(path); err != nil {
		t.Errorf("the ledger is not at %q: %v", path, err)
	}
}

func TestOpenErrors(t *testing.T) {
	for _, c := range []struct {
		path string
		o    *sqlite.Options
		want string
	}{
		{"", nil, "is not a file"},
		{":memory:", nil, "is not a file"},
		{filepath.Join(t.TempDir(), "x.db"), &sqlite.Options{BusyTimeout: -1}, "BusyTimeout"},
		{filepath.Join(t.TempDir(), "x.db"), &sqlite.Options{Readers: -1}, "Readers"},
		{filepath.Join(t.TempDir(), "missing", "dir", "x.db"), nil, "sqlite: Open"},
	} {
		l, err := sqlite.Open(t.Context(), c.path, c.o)
		if err == nil {
			l.Close()
			t.Errorf("Open(%q, %+v): no error, want one with %q", c.path, c.o, c.want)
		} else if !strings.Contains(err.Error(), c.want) {
			t.Errorf("Open(%q, %+v): %v, want %q", c.path, c.o, err, c.want)
		}
	}
}

// v1 is the schema of version 1, as the first version wrote it: a test
// of the upgrade must not read it from the code it tests.
const v1 = `
CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_us INTEGER NOT NULL);
CREATE TABLE ledger_entries (
	key             BLOB    NOT NULL,
	id              TEXT    NOT NULL,
	algorithm       TEXT    NOT NULL,
	quota           INTEGER NOT NULL,
	period_us       INTEGER NOT NULL CHECK (period_us > 0),
	alignment       TEXT    NOT NULL,
	window_start_us INTEGER NOT NULL,
	units           INTEGER NOT NULL CHECK (units >= 0),
	committed_at_us INTEGER NOT NULL,
	PRIMARY KEY (key, id)
);
INSERT INTO schema_migrations VALUES (1, 'entries', 0);
`

// TestUpgradeFromV1 writes a ledger with the schema of version 1 and
// entries in it, then opens it with this code: the migrations run, the
// entries are there, and a retried entry is still not written twice.
func TestUpgradeFromV1(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v1.db")
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)
	if _, err := db.Exec(v1); err != nil {
		t.Fatal(err)
	}
	for i, units := range []int64{3, 4} {
		if _, err := db.Exec(`INSERT INTO ledger_entries VALUES (?, ?, 'fixed_window', 100, 3600000000, 'aligned', ?, ?, ?)`,
			[]byte("acme"), []string{"r1", "r2"}[i], start.UnixMicro(), units, start.Add(time.Minute).UnixMicro()); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()

	l, err := sqlite.Open(t.Context(), path, nil)
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
	// The index of v2 is there.
	var n int
	if err := sqlRead(t, path).QueryRow(`SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND name = 'ledger_entries_window'`).Scan(&n); err != nil || n != 1 {
		t.Errorf("index ledger_entries_window: %d, %v; want it", n, err)
	}
}

func sqlRead(t *testing.T, path string) *sql.DB {
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// TestNewerSchema: a ledger written by a newer version than the code is
// an error, not a guess.
func TestNewerSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "new.db")
	l, err := sqlite.Open(t.Context(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO schema_migrations VALUES (99, 'future', 0)`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if l, err := sqlite.Open(t.Context(), path, nil); err == nil {
		l.Close()
		t.Fatal("Open of a ledger of schema version 99: no error")
	} else if !strings.Contains(err.Error(), "version 99") {
		t.Errorf("Open of a ledger of schema version 99: %v", err)
	}
}

// TestConcurrentOpen: two ledgers opening one new file at once apply each
// migration once.
func TestConcurrentOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "shared.db")
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			l, err := sqlite.Open(t.Context(), path, nil)
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
	var n int
	if err := sqlRead(t, path).QueryRow(`SELECT COUNT(*) FROM schema_migrations`).Scan(&n); err != nil || n != 3 {
		t.Errorf("schema_migrations has %d rows, %v; want 3", n, err)
	}
}

// TestNoCgo: the package builds without cgo, as `floodgate serve -ledger
// FILE` promises on a machine with nothing installed.
func TestNoCgo(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go build")
	}
	cmd := exec.Command("go", "build", "-o", os.DevNull, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("CGO_ENABLED=0 go build (%s): %v\n%s", runtime.GOOS, err, out)
	}
}

func TestOverridesConformance(t *testing.T) {
	ledgertest.RunOverrides(t, func(t *testing.T) ledgertest.Opener {
		path := filepath.Join(t.TempDir(), "ledger.db")
		return func(ctx context.Context) (ledger.Store, error) {
			return sqlite.Open(ctx, path, nil)
		}
	})
}
