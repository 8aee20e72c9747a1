// Package redistest starts real redis-server processes on free loopback
// ports for tests, and stops them when the test ends.
//
// Three topologies are offered: Standalone (one server), StartCluster (a
// Redis Cluster of three or more masters, optionally with replicas) and
// StartSentinel (a master, a replica and three sentinels). Each
// call picks its own ports, so tests in parallel processes never collide,
// gives every process its own t.TempDir, and registers t.Cleanup to stop
// what it started.
// Processes also die with the test binary: on Linux they are started with a
// parent-death signal of SIGKILL.
//
// WithTLS (WithSentinelTLS for a Sentinel set) makes the processes speak TLS
// only, with certificates that NewCerts makes in Go when the test runs: a
// CA, a server certificate for 127.0.0.1 and localhost, a client
// certificate.
//
// The helpers talk to Redis only through the redis-cli binary (Server.CLI),
// so the module needs no Go Redis client. If redis-server or redis-cli is not
// on PATH, every entry point skips the test with a loud message, or fails it
// when the environment variable FLOODGATE_REQUIRE_REDIS is 1, as it is in CI.
package redistest

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

// RequireEnv is the environment variable that turns a missing Redis from a
// skip into a test failure when it is set to 1.
const RequireEnv = "FLOODGATE_REQUIRE_REDIS"

var (
	skipWarning sync.Once
	// warnings receives the loud line of a skip; tests swap it.
	warnings io.Writer = os.Stderr
)

// Require returns the path of redis-server. If redis-server or redis-cli is
// missing it skips the test, and prints a warning on standard error once per
// test binary so the skip is seen without -v; if FLOODGATE_REQUIRE_REDIS=1 it
// fails the test instead. Standalone, StartCluster and StartSentinel call it
// themselves.
func Require(t testing.TB) string {
	t.Helper()
	server, _, err := binaries()
	if err == nil {
		return server
	}
	msg := fmt.Sprintf("redistest: %v: tests that need Redis cannot run; "+
		"install them with `apt-get install -y redis-server redis-tools`", err)
	if os.Getenv(RequireEnv) == "1" {
		t.Fatalf("%s (%s=1 makes this a failure)", msg, RequireEnv)
	}
	skipWarning.Do(func() {
		fmt.Fprintf(warnings, "SKIPPING REDIS TESTS: %s (set %s=1 to fail instead)\n", msg, RequireEnv)
	})
	t.Skipf("SKIPPING: %s", msg)
	return ""
}

// binaries finds redis-server and redis-cli on PATH.
func binaries() (server, cli string, err error) {
	var missing []string
	server, errServer := exec.LookPath("redis-server")
	if errServer != nil {
		missing = append(missing, "redis-server")
	}
	cli, errCLI := exec.LookPath("redis-cli")
	if errCLI != nil {
		missing = append(missing, "redis-cli")
	}
	if len(missing) > 0 {
		return "", "", fmt.Errorf("%s not found in PATH", strings.Join(missing, " and "))
	}
	return server, cli, nil
}

// An Option configures a server started by Standalone, or every node of a
// cluster when passed through WithNodeOptions.
type Option func(*options)

type options struct {
	args         []string
	password     string
	username     string
	userPassword string
	tls          *Certs     // WithTLS; nil: plain TCP
	clientAuth   ClientAuth // WithTLS
}

// WithArgs appends configuration arguments to the redis-server command
// line, after the package's own, so they override them. For example
// WithArgs("--maxmemory", "1mb", "--maxmemory-policy", "noeviction").
func WithArgs(args ...string) Option {
	return func(o *options) { o.args = append(o.args, args...) }
}

// WithPassword sets requirepass, the password of the default user, and
// masterauth, so replicas can authenticate. Server.CLI authenticates with
// it unless WithUser is also given.
func WithPassword(password string) Option {
	return func(o *options) { o.password = password }
}

// WithUser adds an ACL user with every permission (on, ~*, &*, +@all) and
// the given password (none when it is empty). Server.CLI and replication
// authenticate as this user. The default user is left as it is: without a
// password unless WithPassword is given too, or changed with WithArgs, for
// example WithArgs("--user", "default", "off").
func WithUser(username, password string) Option {
	return func(o *options) {
		o.username = username
		o.userPassword = password
	}
}

func newOptions(opts []Option) options {
	var o options
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	return o
}

// auth returns the credentials the helpers send.
func (o options) auth() (username, password string) {
	if o.username != "" {
		return o.username, o.userPassword
	}
	return "", o.password
}
