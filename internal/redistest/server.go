package redistest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	// startTimeout bounds the wait for a new process to answer PING.
	startTimeout = 10 * time.Second
	// stopTimeout bounds the wait for a process to exit after SIGTERM, and
	// after SIGKILL.
	stopTimeout = 10 * time.Second
	// portAttempts bounds how many fresh ports a start tries when another
	// process took the chosen one between the check and the bind.
	portAttempts = 5
	// busOffset is the distance from a cluster node's port to its bus port.
	busOffset = 10000

	logName   = "redis.log"  // what redis-server logs, in Server.Dir
	stdioName = "stdio.log"  // its standard output and error, in Server.Dir
	confName  = "redis.conf" // a sentinel's configuration file, in Server.Dir
)

// errAddrInUse marks a start that failed because the port was taken.
var errAddrInUse = errors.New("address already in use")

// Server is one redis-server process (a data node or a sentinel) listening
// on 127.0.0.1. Get one from Standalone, StartCluster or StartSentinel; the
// zero value is not a server. Its methods are safe for concurrent use; one
// called while Restart is starting the process waits until it answers.
type Server struct {
	// Addr is "127.0.0.1:<Port>".
	Addr string
	// Port is the TCP port the server listens on, kept across Restart.
	Port int
	// Dir is the server's working directory: its log (redis.log), and for
	// a cluster node nodes.conf, for a sentinel redis.conf. It is removed
	// when the test ends.
	Dir string
	// Username is the ACL user CLI authenticates as; empty means the
	// default user.
	Username string
	// Password is the password CLI sends; empty means none.
	Password string
	// TLS holds the certificates of a server started WithTLS, which
	// listens with TLS only; nil for a server on plain TCP.
	TLS *Certs

	server string // path of redis-server
	cli    string // path of redis-cli
	bus    bool   // whether Port+10000 must be free too (cluster bus)
	build  func(port int) ([]string, error)
	args   []string // the command line after the binary, once a port is chosen

	mu   sync.Mutex
	proc *process // nil when not running
}

// process is one run of redis-server.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // what cmd.Wait returned; read after done is closed
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// wait waits for the process to exit, at most d.
func (p *process) wait(d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-p.done:
		return true
	case <-timer.C:
		return false
	}
}

// newServer returns a Server that is not started yet, with a fresh
// directory. build returns the command line for a port.
func newServer(t testing.TB, o options, bus bool, build func(s *Server, port int) ([]string, error)) *Server {
	t.Helper()
	serverBin, cliBin, err := binaries()
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	s := &Server{
		Dir:    t.TempDir(),
		server: serverBin,
		cli:    cliBin,
		bus:    bus,
	}
	s.Username, s.Password = o.auth()
	s.TLS = o.tls
	s.build = func(port int) ([]string, error) { return build(s, port) }
	// Registered after t.TempDir, so it runs before the directory is removed.
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("redistest: cleanup: %v", err)
		}
	})
	return s
}

// Standalone starts one redis-server without persistence (save "",
// appendonly no) and registers t.Cleanup to stop it. It fails the test if
// the server does not answer PING within 10 s.
func Standalone(t testing.TB, opts ...Option) *Server {
	t.Helper()
	Require(t)
	o := newOptions(opts)
	s := newServer(t, o, false, func(s *Server, port int) ([]string, error) {
		return dataArgs(port, s.Dir, o, false), nil
	})
	if err := s.startFresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	return s
}

// dataArgs returns the command line of a data node.
func dataArgs(port int, dir string, o options, cluster bool) []string {
	listen := []string{"--port", strconv.Itoa(port)}
	if o.tls != nil {
		listen = o.tlsArgs(port, cluster)
	}
	args := append(listen,
		"--bind", "127.0.0.1",
		"--protected-mode", "no",
		"--daemonize", "no",
		"--dir", dir,
		"--logfile", filepath.Join(dir, logName),
		"--save", "",
		"--appendonly", "no",
		// A replica syncs at once instead of after the default 5 s wait
		// for more replicas to share a diskless transfer.
		"--repl-diskless-sync-delay", "0",
		// DEBUG SLEEP and friends, for fault tests; from loopback only.
		"--enable-debug-command", "local",
	)
	if cluster {
		args = append(args,
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "2000",
		)
	}
	if o.password != "" {
		args = append(args, "--requirepass", o.password, "--masterauth", o.password)
	}
	if o.username != "" {
		pass := "nopass"
		if o.userPassword != "" {
			pass = ">" + o.userPassword
		}
		args = append(args, "--user", o.username, "on", pass, "~*", "&*", "+@all",
			"--masteruser", o.username)
		if o.userPassword != "" {
			args = append(args, "--masterauth", o.userPassword)
		}
	}
	return append(args, o.args...)
}

// startFresh starts the server on a newly chosen port, choosing again
// (a bounded number of times) if another process takes the port first.
func (s *Server) startFresh(ctx context.Context) error {
	var err error
	for range portAttempts {
		var ports []int
		ports, err = freePorts(1, s.bus)
		if err != nil {
			return err
		}
		if err = s.setPort(ports[0]); err != nil {
			return err
		}
		err = s.start(ctx)
		if !errors.Is(err, errAddrInUse) {
			return err
		}
	}
	return fmt.Errorf("redistest: no free port after %d attempts: %w", portAttempts, err)
}

// setPort fixes the port and the command line.
func (s *Server) setPort(port int) error {
	args, err := s.build(port)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.Port = port
	s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	s.args = args
	return nil
}

// start runs the command line once and waits until the server answers
// PING. On failure the process is gone and the error holds the log tail.
func (s *Server) start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil && !s.proc.exited() {
		return fmt.Errorf("redistest: start %s: already running", s.Addr)
	}
	s.proc = nil

	logOffset := fileSize(filepath.Join(s.Dir, logName))
	stdioOffset := fileSize(filepath.Join(s.Dir, stdioName))
	stdio, err := os.OpenFile(filepath.Join(s.Dir, stdioName), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("redistest: start %s: %w", s.Addr, err)
	}
	cmd := exec.Command(s.server, s.args...)
	cmd.Dir = s.Dir
	cmd.Stdout = stdio
	cmd.Stderr = stdio
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		stdio.Close()
		return fmt.Errorf("redistest: start %s: %w", s.Addr, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		stdio.Close()
		close(p.done)
	}()

	if err := s.waitReady(ctx, p); err != nil {
		if !p.exited() {
			_ = cmd.Process.Kill()
			p.wait(stopTimeout)
		}
		logs := s.logsSince(logOffset, stdioOffset)
		if strings.Contains(logs, "Address already in use") {
			err = fmt.Errorf("%w: %w", errAddrInUse, err)
		}
		return fmt.Errorf("redistest: start redis-server %s in %s: %w\n%s", s.Addr, s.Dir, err, logs)
	}
	s.proc = p
	return nil
}

// waitReady polls PING until the server answers +PONG, the process exits,
// or startTimeout passes.
func (s *Server) waitReady(ctx context.Context, p *process) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	ticker := time.NewTicker(10 * time.Millisecond)
	defer ticker.Stop()
	for {
		err := ping(ctx, s.Addr, s.Username, s.Password, s.TLS)
		if err == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("exited before answering PING: %v", p.err)
		case <-ctx.Done():
			return fmt.Errorf("no PONG within %v: %w", startTimeout, err)
		case <-ticker.C:
		}
	}
}

// ping sends AUTH (if a password is given) and PING on a new connection,
// over TLS with certs unless it is nil, and wants +PONG.
func ping(ctx context.Context, addr, username, password string, certs *Certs) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var (
		conn net.Conn
		err  error
	)
	if certs != nil {
		d := tls.Dialer{Config: certs.ClientConfig()}
		conn, err = d.DialContext(ctx, "tcp", addr)
	} else {
		var d net.Dialer
		conn, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return err
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		if err := conn.SetDeadline(deadline); err != nil {
			return err
		}
	}
	r := bufio.NewReader(conn)
	if password != "" {
		auth := []string{"AUTH", password}
		if username != "" {
			auth = []string{"AUTH", username, password}
		}
		if err := roundTrip(conn, r, auth, "+OK"); err != nil {
			return err
		}
	}
	return roundTrip(conn, r, []string{"PING"}, "+PONG")
}

// roundTrip writes one command and wants a one-line reply equal to want.
func roundTrip(w io.Writer, r *bufio.Reader, args []string, want string) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := w.Write(b.Bytes()); err != nil {
		return err
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	if got := strings.TrimRight(line, "\r\n"); got != want {
		return fmt.Errorf("%s: got %q, want %q", args[0], got, want)
	}
	return nil
}

// Stop sends SIGTERM (and SIGCONT, in case the server is paused) and waits
// up to 10 s for the process to exit, then kills it. It returns an error if
// the process had to be killed, exited with a failure, or had already died
// on its own. Calling Stop on a stopped server returns nil.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.proc
	if p == nil {
		return nil
	}
	s.proc = nil
	if p.exited() {
		if p.err != nil {
			return fmt.Errorf("redistest: %s had exited by itself: %v\n%s", s.Addr, p.err, s.logTail())
		}
		return nil
	}
	_ = p.cmd.Process.Signal(sigTerm)
	if sigCont != nil {
		_ = p.cmd.Process.Signal(sigCont)
	}
	if !p.wait(stopTimeout) {
		_ = p.cmd.Process.Kill()
		p.wait(stopTimeout)
		return fmt.Errorf("redistest: %s did not exit within %v of SIGTERM; killed it\n%s", s.Addr, stopTimeout, s.logTail())
	}
	if p.err != nil {
		return fmt.Errorf("redistest: stop %s: %v\n%s", s.Addr, p.err, s.logTail())
	}
	return nil
}

// Kill sends SIGKILL, as a crash would, and waits for the process to exit.
// Calling Kill on a stopped server returns nil.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.proc
	if p == nil {
		return nil
	}
	s.proc = nil
	if p.exited() {
		return nil
	}
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("redistest: kill %s: %w", s.Addr, err)
	}
	if !p.wait(stopTimeout) {
		return fmt.Errorf("redistest: kill %s: still running %v after SIGKILL", s.Addr, stopTimeout)
	}
	return nil
}

// Pause stops the process with SIGSTOP: its port still accepts connections
// but nothing is answered, as with a hung server or a long GC pause. Resume
// continues it; Stop and Kill work on a paused server.
func (s *Server) Pause() error {
	return s.signal("pause", sigStop)
}

// Resume continues a process stopped by Pause with SIGCONT.
func (s *Server) Resume() error {
	return s.signal("resume", sigCont)
}

func (s *Server) signal(what string, sig os.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sig == nil {
		return fmt.Errorf("redistest: %s %s: not supported on this platform", what, s.Addr)
	}
	if s.proc == nil || s.proc.exited() {
		return fmt.Errorf("redistest: %s %s: not running", what, s.Addr)
	}
	if err := s.proc.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("redistest: %s %s: %w", what, s.Addr, err)
	}
	return nil
}

// Restart starts the server again on the same port, in the same directory,
// with the same command line; it stops it first if it is running. Data is
// not kept (there is no persistence), but a cluster node keeps its
// nodes.conf and so its place in the cluster, and a sentinel its rewritten
// configuration. If another process holds the port, Restart retries until
// 10 s have passed. The cleanup registered when the server was started
// stops the restarted process too.
func (s *Server) Restart(t testing.TB) error {
	t.Helper()
	if err := s.Stop(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(t.Context(), startTimeout)
	defer cancel()
	ticker := time.NewTicker(100 * time.Millisecond)
	defer ticker.Stop()
	for {
		err := s.start(ctx)
		if !errors.Is(err, errAddrInUse) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redistest: restart: port %d still in use after %v: %w", s.Port, startTimeout, err)
		case <-ticker.C:
		}
	}
}

// MustCLI is CLI with a 30 s deadline under t's context, for tests: an
// error fails t. The deadline only stops a test from hanging on a server
// that never answers; starting redis-cli from a test binary built with
// -race on a loaded 2-core machine once took more than the 5 s it was.
func (s *Server) MustCLI(t testing.TB, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	out, err := s.CLI(ctx, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// CLI runs redis-cli -h 127.0.0.1 -p <Port> -e args... with the server's
// credentials (and for a TLS server --tls, with the CA and the client
// certificate of its Certs) and returns its trimmed standard output
// (replies in raw format, one element per line). Options may come first in args, as in
// CLI(ctx, "-c", "SET", "k", "v") to follow cluster redirections. An error
// reply, a connection failure or the end of ctx is an error; the output is
// returned with it. A paused server never answers: give ctx a deadline.
func (s *Server) CLI(ctx context.Context, args ...string) (string, error) {
	s.mu.Lock()
	port := s.Port
	s.mu.Unlock()
	base := []string{"-h", "127.0.0.1", "-p", strconv.Itoa(port), "-e"}
	return s.runCLI(ctx, append(base, args...))
}

// runCLI runs redis-cli with args and the server's credentials and TLS
// certificates, sending the password through the environment so it
// appears neither in ps nor in a warning.
func (s *Server) runCLI(ctx context.Context, args []string) (string, error) {
	if s.Username != "" {
		args = append([]string{"--user", s.Username}, args...)
	}
	args = append(cliTLSArgs(s.TLS), args...)
	cmd := exec.CommandContext(ctx, s.cli, args...)
	cmd.Env = os.Environ()
	if s.Password != "" {
		cmd.Env = append(cmd.Env, "REDISCLI_AUTH="+s.Password)
	}
	cmd.WaitDelay = time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	err := cmd.Run()
	out := strings.TrimSpace(stdout.String())
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			err = fmt.Errorf("%w (%v)", ctxErr, err)
		}
		detail := strings.TrimSpace(out + "\n" + stderr.String())
		return out, fmt.Errorf("redistest: redis-cli %s: %w: %s", strings.Join(args, " "), err, detail)
	}
	return out, nil
}

// freePorts returns n distinct loopback ports that were free when it
// looked; with bus, port+10000 was free too. The ports are held until all
// are chosen, so they differ from each other and from each other's bus
// ports, then released for redis-server to bind.
func freePorts(n int, bus bool) ([]int, error) {
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	var ports []int
	for tries := 0; len(ports) < n; tries++ {
		if tries >= 100*n {
			return nil, fmt.Errorf("redistest: found %d of %d free ports after %d tries", len(ports), n, tries)
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("redistest: find a free port: %w", err)
		}
		held = append(held, l)
		port := l.Addr().(*net.TCPAddr).Port
		if bus {
			if port+busOffset > 65535 {
				continue
			}
			lb, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+busOffset)))
			if err != nil {
				continue
			}
			held = append(held, lb)
		}
		ports = append(ports, port)
	}
	return ports, nil
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// logsSince returns what the server logged, and wrote to its standard
// output and error, after the given offsets: the story of one start.
func (s *Server) logsSince(logOffset, stdioOffset int64) string {
	return tail(filepath.Join(s.Dir, logName), logOffset) + tail(filepath.Join(s.Dir, stdioName), stdioOffset)
}

// logTail returns the end of the server's log files.
func (s *Server) logTail() string {
	return s.logsSince(0, 0)
}

// tail returns at most the last 4 KiB of path after offset, labelled.
func tail(path string, offset int64) string {
	const limit = 4 << 10
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	size := fileSize(path)
	if size-offset > limit {
		offset = size - limit
	}
	b, err := io.ReadAll(io.NewSectionReader(f, offset, size-offset))
	if err != nil || len(bytes.TrimSpace(b)) == 0 {
		return ""
	}
	return fmt.Sprintf("--- %s ---\n%s\n", path, bytes.TrimSpace(b))
}
