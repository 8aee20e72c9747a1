// Package pgtest starts a real PostgreSQL server on a free loopback port
// for tests, as internal/redistest starts Redis, and stops it when the
// tests end.
//
// A package shares one server among its tests: its TestMain calls Main,
// and each test that needs a database calls Database, which starts the
// server on first use and creates a new, empty database for the test:
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
//
//	func TestSomething(t *testing.T) {
//		url := pgtest.Database(t) // postgres://postgres@127.0.0.1:PORT/t3?sslmode=disable
//		…
//	}
//
// Start gives a test a server of its own instead (a restart, a stop, or
// settings of its own such as fsync for a benchmark). A server lives in a
// temporary directory (its data, its log, its Unix socket), listens on
// 127.0.0.1 only, trusts every local connection, and runs with fsync off
// and small buffers so that it starts in about a second: it is for tests,
// never for data. Stop, or Main for the shared one, stops it and removes
// the directory; on Linux it also dies with the test binary (a
// parent-death signal).
//
// The binaries (initdb and postgres) are looked up on PATH, then in
// /usr/lib/postgresql/*/bin, the newest version first, where Debian's
// postgresql package puts them without linking them into PATH. PostgreSQL
// refuses to run as root: when the tests run as root (as in CI), the
// server runs as the "postgres" system user that the Debian package
// creates, or else as "nobody", in a directory that user owns.
//
// If PostgreSQL is not installed, every entry point skips the test with a
// loud message, or fails it when the environment variable
// FLOODGATE_REQUIRE_POSTGRES is 1, as it is in CI.
package pgtest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// RequireEnv is the environment variable that turns a missing PostgreSQL
// from a skip into a test failure when it is set to 1.
const RequireEnv = "FLOODGATE_REQUIRE_POSTGRES"

const (
	// startTimeout bounds initdb, and the wait for a new server to accept
	// a connection.
	startTimeout = 60 * time.Second
	// stopTimeout bounds the wait for the server to exit after SIGINT
	// (fast shutdown), and after SIGKILL.
	stopTimeout = 15 * time.Second
	// portAttempts bounds how many fresh ports a start tries when another
	// process took the chosen one between the check and the bind.
	portAttempts = 5
	// superuser is the role initdb makes.
	superuser = "postgres"
)

var (
	skipWarning sync.Once
	// warnings receives the loud line of a skip; tests swap it.
	warnings io.Writer = os.Stderr
)

// Require returns the directory holding initdb and postgres. If they are
// missing it skips the test, and prints a warning on standard error once
// per test binary so the skip is seen without -v; if
// FLOODGATE_REQUIRE_POSTGRES=1 it fails the test instead. Start and
// Database call it themselves.
func Require(tb testing.TB) string {
	tb.Helper()
	dir, err := binDir()
	if err == nil {
		return dir
	}
	msg := fmt.Sprintf("pgtest: %v: tests that need PostgreSQL cannot run; "+
		"install it with `apt-get install -y postgresql`", err)
	if os.Getenv(RequireEnv) == "1" {
		tb.Fatalf("%s (%s=1 makes this a failure)", msg, RequireEnv)
	}
	skipWarning.Do(func() {
		fmt.Fprintf(warnings, "SKIPPING POSTGRESQL TESTS: %s (set %s=1 to fail instead)\n", msg, RequireEnv)
	})
	tb.Skipf("SKIPPING: %s", msg)
	return ""
}

// debianDirs is where Debian's packages put the binaries of each major
// version; a variable so a test can point it elsewhere.
var debianDirs = "/usr/lib/postgresql/*/bin"

// binDir finds a directory holding both initdb and postgres: the one of
// postgres on PATH (links followed) if initdb is beside it or on PATH
// too, else the newest /usr/lib/postgresql/VERSION/bin.
func binDir() (string, error) {
	if p, err := exec.LookPath("postgres"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil && hasBoth(filepath.Dir(real)) {
			return filepath.Dir(real), nil
		}
		if hasBoth(filepath.Dir(p)) {
			return filepath.Dir(p), nil
		}
	}
	dirs, _ := filepath.Glob(debianDirs)
	// Newest first: 15 before 9.6, by the version's numbers.
	slices.SortFunc(dirs, func(a, b string) int { return -compareVersions(versionOf(a), versionOf(b)) })
	for _, d := range dirs {
		if hasBoth(d) {
			return d, nil
		}
	}
	return "", fmt.Errorf("initdb and postgres not found on PATH nor in %s", debianDirs)
}

func hasBoth(dir string) bool {
	for _, name := range []string{"initdb", "postgres"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

// versionOf is the VERSION of /usr/lib/postgresql/VERSION/bin.
func versionOf(binDir string) string { return filepath.Base(filepath.Dir(binDir)) }

func compareVersions(a, b string) int {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := range max(len(as), len(bs)) {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		if c := cmp.Compare(x, y); c != 0 {
			return c
		}
	}
	return 0
}

// Options configure Start. The zero value is a server for tests: fsync
// off.
type Options struct {
	// Fsync keeps PostgreSQL's defaults for durability (fsync,
	// synchronous_commit, full_page_writes on), for a benchmark of
	// durable writes; by default they are off, which makes a test server
	// faster and its data lost in a crash.
	Fsync bool
	// Settings are more "name=value" settings, passed as -c, after the
	// package's own.
	Settings []string
}

// Server is one PostgreSQL server listening on 127.0.0.1. Get one from
// Start, or the shared one through Database. Its methods are safe for
// concurrent use.
type Server struct {
	// Port is the TCP port on 127.0.0.1.
	Port int
	// Dir holds the data directory (data/), the log (postgres.log) and
	// the Unix socket; it is removed when the server is stopped.
	Dir string
	// BinDir is where initdb and postgres were found.
	BinDir string

	cred *syscall.Credential // nil: run as this process's user
	opts Options

	mu    sync.Mutex
	cmd   *exec.Cmd
	done  chan struct{} // closed when the process has exited
	err   error         // cmd.Wait's; read after done is closed
	dbs   atomic.Int64
	admin *pgx.Conn // for CREATE DATABASE, guarded by mu
}

// Start starts a server of the test's own and registers t.Cleanup to
// stop it and remove its directory. It fails the test if the server does
// not start within a minute.
func Start(tb testing.TB, o *Options) *Server {
	tb.Helper()
	bin := Require(tb)
	var opts Options
	if o != nil {
		opts = *o
	}
	s, err := start(tb.Context(), bin, opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := s.Stop(); err != nil {
			tb.Errorf("pgtest: cleanup: %v", err)
		}
	})
	return s
}

// start makes the directory, runs initdb and starts the server.
func start(ctx context.Context, bin string, opts Options) (_ *Server, err error) {
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	s := &Server{Dir: dir, BinDir: bin, opts: opts}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	if os.Geteuid() == 0 {
		if s.cred, err = unprivileged(dir); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	if err := s.initdb(ctx); err != nil {
		return nil, err
	}
	for range portAttempts {
		if err = s.startOnFreePort(ctx); !errors.Is(err, errAddrInUse) {
			return s, err
		}
	}
	return nil, fmt.Errorf("pgtest: no free port after %d attempts: %w", portAttempts, err)
}

// unprivileged returns the credential of the user the server runs as
// when the tests run as root, "postgres" or else "nobody", and gives it
// dir.
func unprivileged(dir string) (*syscall.Credential, error) {
	var errs []error
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err := errors.Join(err1, err2); err != nil || uid == 0 {
			errs = append(errs, fmt.Errorf("user %s: uid %q, gid %q", name, u.Uid, u.Gid))
			continue
		}
		if err := os.Chown(dir, int(uid), int(gid)); err != nil {
			return nil, fmt.Errorf("pgtest: give %s to %s: %w", dir, name, err)
		}
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
	}
	return nil, fmt.Errorf("pgtest: running as root, and no unprivileged user to run postgres as: %w", errors.Join(errs...))
}

// command is name from BinDir, run in Dir as the server's user, its
// output appended to the log, killed when ctx ends.
func (s *Server) command(ctx context.Context, log io.Writer, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(s.BinDir, name), args...)
	cmd.Dir = s.Dir
	cmd.Stdout, cmd.Stderr = log, log
	// The C locale and no inherited PG* variables: the server is the same
	// whatever the environment of the tests.
	env := []string{"LC_ALL=C", "TZ=UTC"}
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PATH=") {
			env = append(env, kv)
		}
	}
	cmd.Env = env
	cmd.SysProcAttr = sysProcAttr(s.cred)
	return cmd
}

func (s *Server) logPath() string { return filepath.Join(s.Dir, "postgres.log") }

func (s *Server) openLog() (*os.File, error) {
	f, err := os.OpenFile(s.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err == nil && s.cred != nil {
		err = f.Chown(int(s.cred.Uid), int(s.cred.Gid))
	}
	return f, err
}

func (s *Server) initdb(ctx context.Context) error {
	log, err := s.openLog()
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	defer log.Close()
	cmd := s.command(ctx, log, "initdb", "-D", filepath.Join(s.Dir, "data"), "-U", superuser,
		"--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions")
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("pgtest: initdb in %s: %w\n%s", s.Dir, err, s.logTail())
	}
	return nil
}

// errAddrInUse marks a start that failed because the port was taken.
var errAddrInUse = errors.New("address already in use")

func (s *Server) startOnFreePort(ctx context.Context) error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("pgtest: find a free port: %w", err)
	}
	s.Port = l.Addr().(*net.TCPAddr).Port
	l.Close()
	return s.startProcess(ctx)
}

// startProcess starts postgres on s.Port and waits until it accepts a
// connection.
func (s *Server) startProcess(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	log, err := s.openLog()
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	offset, _ := log.Seek(0, io.SeekEnd)
	args := []string{"-D", filepath.Join(s.Dir, "data"), "-k", s.Dir, "-h", "127.0.0.1", "-p", strconv.Itoa(s.Port),
		"-c", "shared_buffers=16MB", "-c", "max_connections=64", "-c", "max_wal_size=256MB",
		"-c", "logging_collector=off", "-c", "log_min_messages=warning"}
	if !s.opts.Fsync {
		args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	for _, kv := range s.opts.Settings {
		args = append(args, "-c", kv)
	}
	// Not tied to ctx: the server outlives the call that starts it.
	cmd := s.command(context.WithoutCancel(ctx), log, "postgres", args...)
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("pgtest: start postgres: %w", err)
	}
	done := make(chan struct{})
	s.cmd, s.done = cmd, done
	go func() {
		s.err = cmd.Wait()
		log.Close()
		close(done)
	}()
	if err := s.waitReady(ctx, done); err != nil {
		s.kill()
		logs := tailFrom(s.logPath(), offset)
		if strings.Contains(logs, "Address already in use") || strings.Contains(logs, "could not bind") {
			err = fmt.Errorf("%w: %w", errAddrInUse, err)
		}
		return fmt.Errorf("pgtest: start postgres on 127.0.0.1:%d in %s: %w\n%s", s.Port, s.Dir, err, logs)
	}
	return nil
}

// waitReady connects until the server answers, it exits, or ctx ends.
func (s *Server) waitReady(ctx context.Context, done <-chan struct{}) error {
	ticker := time.NewTicker(20 * time.Millisecond)
	defer ticker.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		conn, err := pgx.Connect(cctx, s.URL("postgres"))
		cancel()
		if err == nil {
			s.admin = conn
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("exited before accepting connections: %v", s.err)
		case <-ctx.Done():
			return fmt.Errorf("not accepting connections: %w (%v)", ctx.Err(), err)
		case <-ticker.C:
		}
	}
}

// URL is the connection URL of database db on the server, as the
// superuser, without TLS.
func (s *Server) URL(db string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", superuser, s.Port, db)
}

// NewDatabase creates a new, empty database on the server and returns
// its URL. Databases are named t1, t2, …; each is removed with the
// server.
func (s *Server) NewDatabase(tb testing.TB) string {
	tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.admin == nil {
		tb.Fatalf("pgtest: NewDatabase: the server on port %d is stopped", s.Port)
	}
	name := fmt.Sprintf("t%d", s.dbs.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		tb.Fatalf("pgtest: CREATE DATABASE %s: %v", name, err)
	}
	return s.URL(name)
}

// Stop shuts the server down (SIGINT: a fast shutdown that ends the
// sessions) and waits for it, killing it after 15 s, then removes Dir.
// It returns an error if the server had to be killed or had exited by
// itself; calling it again returns nil.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.admin != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		s.admin.Close(ctx)
		cancel()
		s.admin = nil
	}
	var err error
	if s.cmd != nil {
		select {
		case <-s.done:
			err = fmt.Errorf("pgtest: postgres on port %d had exited by itself: %v\n%s", s.Port, s.err, s.logTail())
		default:
			_ = s.cmd.Process.Signal(os.Interrupt)
			if !wait(s.done, stopTimeout) {
				err = fmt.Errorf("pgtest: postgres on port %d did not exit within %v of SIGINT; killed it\n%s", s.Port, stopTimeout, s.logTail())
				s.kill()
			}
		}
		s.cmd = nil
	}
	if s.Dir != "" {
		if rmErr := os.RemoveAll(s.Dir); rmErr != nil && err == nil {
			err = fmt.Errorf("pgtest: %w", rmErr)
		}
	}
	return err
}

// kill sends SIGKILL and waits for the exit; s.mu is held.
func (s *Server) kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	wait(s.done, stopTimeout)
}

func wait(done <-chan struct{}, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-done:
		return true
	case <-timer.C:
		return false
	}
}

func (s *Server) logTail() string { return tailFrom(s.logPath(), 0) }

// tailFrom returns at most the last 4 KiB of path after offset, labelled.
func tailFrom(path string, offset int64) string {
	const limit = 4 << 10
	b, err := os.ReadFile(path)
	if err != nil || offset >= int64(len(b)) {
		return ""
	}
	b = b[offset:]
	if len(b) > limit {
		b = b[len(b)-limit:]
	}
	if s := strings.TrimSpace(string(b)); s != "" {
		return fmt.Sprintf("--- %s ---\n%s\n", path, s)
	}
	return ""
}

// The shared server of a test binary, started by the first Database and
// stopped by Main.
var shared struct {
	mu      sync.Mutex
	inMain  bool
	server  *Server
	err     error // the start's failure, reported to every later test
	started bool
}

// Main runs the tests of a package whose tests share one server
// (Database), then stops that server if one was started. Call it from
// TestMain: os.Exit(pgtest.Main(m)).
func Main(m *testing.M) int {
	shared.mu.Lock()
	shared.inMain = true
	shared.mu.Unlock()
	code := m.Run()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if s := shared.server; s != nil {
		if err := s.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			if code == 0 {
				code = 1
			}
		}
	}
	return code
}

// Shared returns the package's shared server, starting it on first use.
// The package's TestMain must call Main.
func Shared(tb testing.TB) *Server {
	tb.Helper()
	bin := Require(tb)
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if !shared.inMain {
		tb.Fatal("pgtest: the shared server needs TestMain to call pgtest.Main, which stops it")
	}
	if !shared.started {
		shared.started = true
		// Not the test's context: the server outlives the test.
		shared.server, shared.err = start(context.Background(), bin, Options{})
	}
	if shared.err != nil {
		tb.Fatal(shared.err)
	}
	return shared.server
}

// Database creates a new, empty database on the package's shared server
// (Shared) and returns its URL.
func Database(tb testing.TB) string {
	tb.Helper()
	return Shared(tb).NewDatabase(tb)
}
