package redisstore

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// This file starts redis-server for the tests until internal/redistest
// lands. A test that needs Redis calls standaloneAddr: it skips loudly
// without redis-server, and fails instead when FLOODGATE_REQUIRE_REDIS=1.

var (
	sharedOnce sync.Once
	sharedAddr string
	sharedErr  error
	sharedStop func()
)

func TestMain(m *testing.M) {
	code := m.Run()
	if sharedStop != nil {
		sharedStop()
	}
	os.Exit(code)
}

// standaloneAddr is the address of a redis-server shared by the package's
// tests (each test uses its own key prefix).
func standaloneAddr(t testing.TB) string {
	t.Helper()
	sharedOnce.Do(func() { sharedAddr, sharedStop, sharedErr = startRedis() })
	if sharedErr != nil {
		noRedis(t, sharedErr)
	}
	return sharedAddr
}

func noRedis(t testing.TB, err error) {
	t.Helper()
	if os.Getenv("FLOODGATE_REQUIRE_REDIS") == "1" {
		t.Fatalf("redis-server is required (FLOODGATE_REQUIRE_REDIS=1): %v", err)
	}
	t.Skipf("SKIPPING: no usable redis-server (%v); install redis-server or set FLOODGATE_REQUIRE_REDIS=1 to fail", err)
}

func startRedis() (string, func(), error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", nil, err
	}
	dir, err := os.MkdirTemp("", "redisstore-test-")
	if err != nil {
		return "", nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--logfile", filepath.Join(dir, "redis.log"))
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop := func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = os.RemoveAll(dir)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err == nil {
			fmt.Fprintf(c, "PING\r\n")
			buf := make([]byte, 16)
			_ = c.SetReadDeadline(time.Now().Add(time.Second))
			n, _ := c.Read(buf)
			c.Close()
			if strings.HasPrefix(string(buf[:n]), "+PONG") {
				return addr, stop, nil
			}
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			stop()
			return "", nil, fmt.Errorf("redis-server on %s did not answer: %s", addr, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// newRueidis returns a rueidis client of addr, closed by the test's end.
func newRueidis(t testing.TB, addr string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// testPrefix is a key prefix of the test's own.
func testPrefix(t testing.TB) string {
	return "fgtest-" + strings.NewReplacer("/", "-", " ", "_", "{", "(", "}", ")").Replace(t.Name()) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
}

// checkTTLs fails the test if a key under prefix has no TTL. Tests call it
// at their end (through t.Cleanup).
func checkTTLs(t testing.TB, c rueidis.Client, prefix string) {
	t.Helper()
	ctx := context.Background()
	for _, node := range c.Nodes() {
		var cursor uint64
		for {
			e, err := node.Do(ctx, node.B().Scan().Cursor(cursor).Match(escapeGlob(prefix)+":*").Count(1000).Build()).AsScanEntry()
			if err != nil {
				t.Errorf("SCAN: %v", err)
				return
			}
			for _, k := range e.Elements {
				ttl, err := node.Do(ctx, node.B().Pttl().Key(k).Build()).AsInt64()
				if err != nil {
					t.Errorf("PTTL %s: %v", k, err)
				} else if ttl == -1 { // -2: expired since the SCAN; 0: expiring now
					t.Errorf("key %q has no TTL", k)
				}
			}
			if cursor = e.Cursor; cursor == 0 {
				break
			}
		}
	}
}

func escapeGlob(s string) string {
	return strings.NewReplacer(`\`, `\\`, "*", `\*`, "?", `\?`, "[", `\[`, "]", `\]`).Replace(s)
}
