package pgtest

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

func query(t *testing.T, url, sql string) string {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var s string
	if err := conn.QueryRow(t.Context(), sql).Scan(&s); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return s
}

// TestDatabase: two databases of the shared server are apart, on
// loopback, with fsync off.
func TestDatabase(t *testing.T) {
	a, b := Database(t), Database(t)
	if a == b {
		t.Fatalf("two databases with one URL %s", a)
	}
	conn, err := pgx.Connect(t.Context(), a)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(t.Context(), "CREATE TABLE x (n int)"); err != nil {
		t.Fatal(err)
	}
	if got := query(t, b, "SELECT count(*)::text FROM pg_tables WHERE tablename = 'x'"); got != "0" {
		t.Errorf("a table of one database is in the other (%s)", got)
	}
	if got := query(t, a, "SHOW fsync"); got != "off" {
		t.Errorf("fsync = %s, want off", got)
	}
	if got := query(t, a, "SHOW listen_addresses"); got != "127.0.0.1" {
		t.Errorf("listen_addresses = %s, want 127.0.0.1", got)
	}
	if s1, s2 := Shared(t), Shared(t); s1 != s2 {
		t.Error("Shared returned two servers")
	}
}

// TestStartStop: a server of a test's own, run as an unprivileged user
// when the tests run as root, is gone with its directory after Stop.
func TestStartStop(t *testing.T) {
	s := Start(t, &Options{Fsync: true})
	url := s.NewDatabase(t)
	if got := query(t, url, "SHOW fsync"); got != "on" {
		t.Errorf("fsync = %s with Options.Fsync, want on", got)
	}
	fi, err := os.Stat(filepath.Join(s.Dir, "data"))
	if err != nil {
		t.Fatal(err)
	}
	owner := fi.Sys().(*syscall.Stat_t).Uid
	if os.Geteuid() == 0 && owner == 0 {
		t.Errorf("running as root, the data directory is root's: postgres would refuse to start")
	}
	if os.Geteuid() != 0 && int(owner) != os.Geteuid() {
		t.Errorf("the data directory is uid %d's, not this process's %d", owner, os.Geteuid())
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.Dir); !os.IsNotExist(err) {
		t.Errorf("%s is still there after Stop: %v", s.Dir, err)
	}
	if _, err := pgx.Connect(t.Context(), url); err == nil {
		t.Error("connected to a stopped server")
	}
	if err := s.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

// TestBinDirDebian: without postgres on PATH the binaries are found
// where Debian's package puts them, the newest version first.
func TestBinDirDebian(t *testing.T) {
	root := t.TempDir()
	for _, v := range []string{"9.6", "13", "15"} {
		dir := filepath.Join(root, v, "bin")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"initdb", "postgres"} {
			if v == "15" && name == "initdb" {
				continue // an incomplete install is passed over
			}
			if err := os.WriteFile(filepath.Join(dir, name), nil, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Setenv("PATH", t.TempDir())
	old := debianDirs
	debianDirs = filepath.Join(root, "*", "bin")
	t.Cleanup(func() { debianDirs = old })
	dir, err := binDir()
	if want := filepath.Join(root, "13", "bin"); err != nil || dir != want {
		t.Errorf("binDir() = %q, %v; want %q", dir, err, want)
	}

	debianDirs = filepath.Join(root, "none", "*", "bin")
	if _, err := binDir(); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("binDir() with nothing installed: %v", err)
	}
}

// TestRequireSkips: without PostgreSQL, and without
// FLOODGATE_REQUIRE_POSTGRES=1, a test skips and says so on stderr.
func TestRequireSkips(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	t.Setenv(RequireEnv, "")
	old, oldWarnings := debianDirs, warnings
	debianDirs = filepath.Join(t.TempDir(), "*", "bin")
	var buf bytes.Buffer
	warnings = &buf
	t.Cleanup(func() { debianDirs, warnings = old, oldWarnings })
	skipped := false
	t.Run("missing", func(t *testing.T) {
		defer func() { skipped = t.Skipped() }()
		Require(t)
		t.Error("Require returned without PostgreSQL")
	})
	if !skipped {
		t.Error("the test did not skip")
	}
	if !strings.Contains(buf.String(), "SKIPPING POSTGRESQL TESTS") {
		t.Errorf("no loud warning, got %q", buf.String())
	}
}

func TestCompareVersions(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{{"9.6", "15", -1}, {"15", "15", 0}, {"16", "15", 1}, {"9.6", "9.5", 1}} {
		if got := compareVersions(c.a, c.b); got != c.want {
			t.Errorf("compareVersions(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}
