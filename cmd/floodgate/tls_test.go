package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// decided asks in for one decision of key under a limit of 2 a minute and
// reports whether the store decided it (true also when denied), with the
// answer.
func decided(t *testing.T, in *instance, key string) (bool, string) {
	t.Helper()
	code, body := in.allow(t, `{"key": "`+key+`", "limit": {"limit": 2, "period": "1m"}}`)
	return (code == 200 || code == 429) && !strings.Contains(body, "store_error"), body
}

// TestServeRedisTLS runs serve on a Redis that speaks only TLS and
// requires client certificates: with -redis-tls-ca and the client
// certificate it decides, and admits exactly the limit.
func TestServeRedisTLS(t *testing.T) {
	certs := redistest.NewCerts(t)
	redis := redistest.Standalone(t, redistest.WithTLS(certs, redistest.ClientCertRequired))
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"ip", nil},
		{"server name", []string{"-redis-tls-server-name", "localhost"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := startServe(t, append([]string{"-redis", "rediss://" + redis.Addr, "-timeout", "5s",
				"-redis-tls-ca", certs.CAFile, "-redis-tls-cert", certs.ClientCertFile, "-redis-tls-key", certs.ClientKeyFile}, tc.args...)...)
			for i, want := range []string{`"allowed":true`, `"allowed":true`, `"allowed":false`} {
				ok, body := decided(t, in, "tls")
				if !ok || !strings.Contains(body, want) {
					t.Errorf("request %d: %s, want %s from Redis", i, body, want)
				}
			}
			if got := redis.MustCLI(t, "DBSIZE"); got != "1" {
				t.Errorf("DBSIZE %s, want the 1 key of the limit", got)
			}
			redis.MustCLI(t, "FLUSHALL")
		})
	}
}

// TestServeRedisTLSErrors checks that the -redis-tls-* flags fail at start
// with an error naming the flag (and the file, or why TLS failed): exit 2
// for flags that do not fit together, 1 for files or servers that fail.
func TestServeRedisTLSErrors(t *testing.T) {
	certs := redistest.NewCerts(t)
	redis := redistest.Standalone(t, redistest.WithTLS(certs, redistest.ClientCertRequired))
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.pem")
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	u := "rediss://" + redis.Addr
	client := []string{"-redis-tls-cert", certs.ClientCertFile, "-redis-tls-key", certs.ClientKeyFile}
	for _, tc := range []struct {
		name string
		args []string
		code int
		want []string // in stderr
	}{
		{"cert without key", []string{"-redis", u, "-redis-tls-cert", certs.ClientCertFile}, 2, []string{"-redis-tls-cert and -redis-tls-key: give both"}},
		{"key without cert", []string{"-redis", u, "-redis-tls-key", certs.ClientKeyFile}, 2, []string{"-redis-tls-cert and -redis-tls-key: give both"}},
		{"no TLS in the URL", []string{"-redis", "redis://" + redis.Addr, "-redis-tls-ca", certs.CAFile}, 2, []string{"-redis-tls-ca: needs TLS, but -redis is redis://"}},
		{"memory store", []string{"-redis-tls-server-name", "localhost"}, 2, []string{"-redis-tls-server-name: needs -redis"}},
		{"missing CA", []string{"-redis", u, "-redis-tls-ca", missing}, 1, []string{"-redis-tls-ca", missing, "no such file"}},
		{"CA not PEM", []string{"-redis", u, "-redis-tls-ca", notPEM}, 1, []string{"-redis-tls-ca " + notPEM + ": no PEM certificate"}},
		{"key not PEM", []string{"-redis", u, "-redis-tls-cert", certs.ClientCertFile, "-redis-tls-key", notPEM}, 1, []string{"-redis-tls-cert " + certs.ClientCertFile, "-redis-tls-key " + notPEM}},
		{"key of another certificate", []string{"-redis", u, "-redis-tls-cert", certs.ClientCertFile, "-redis-tls-key", certs.ServerKeyFile}, 1, []string{"-redis-tls-key " + certs.ServerKeyFile, "private key does not match"}},
		{"system roots", append([]string{"-redis", u}, client...), 1, []string{"store unavailable", "certificate signed by unknown authority"}},
		{"no client certificate", []string{"-redis", u, "-redis-tls-ca", certs.CAFile}, 1, []string{"store unavailable", "asked for a TLS client certificate"}},
		{"wrong server name", append([]string{"-redis", u, "-redis-tls-ca", certs.CAFile, "-redis-tls-server-name", "redis.example"}, client...), 1, []string{"certificate is valid for localhost, not redis.example"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
			defer cancel()
			var stdout, stderr syncBuffer
			args := append([]string{"serve", "-http", "127.0.0.1:0", "-grpc", ""}, tc.args...)
			code := run(ctx, args, &stdout, &stderr)
			if ctx.Err() != nil {
				t.Fatalf("serve ran until the test's deadline; stderr:\n%s", stderr.String())
			}
			if code != tc.code {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tc.code, stderr.String())
			}
			for _, want := range tc.want {
				if !strings.Contains(stderr.String(), want) {
					t.Errorf("stderr does not say %q:\n%s", want, stderr.String())
				}
			}
		})
	}
	t.Run("env", func(t *testing.T) {
		t.Setenv("FLOODGATE_REDIS_TLS_CERT", certs.ClientCertFile)
		var stdout, stderr syncBuffer
		if code := run(t.Context(), []string{"serve", "-redis", u}, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "give both") {
			t.Errorf("FLOODGATE_REDIS_TLS_CERT without a key: exit %d, stderr %s", code, stderr.String())
		}
	})
}

// TestServeRedisTLSRotation renews serve's client certificate while it
// runs: the new one must be read at the next connection, since Redis then
// no longer trusts the old one. The server trusts two CAs at first: CA A,
// which signed its own certificate and redistest's client certificate,
// and CA B, which signed serve's first certificate. Then the files get a
// certificate of CA A, Redis is told to trust CA A alone, and every
// connection is killed: serve decides again only if it presents the new
// certificate.
func TestServeRedisTLSRotation(t *testing.T) {
	a, b := redistest.NewCerts(t), redistest.NewCerts(t)
	dir := t.TempDir()
	both := filepath.Join(dir, "a-and-b.pem")
	if err := os.WriteFile(both, append(a.CAPEM(), b.CAPEM()...), 0o644); err != nil {
		t.Fatal(err)
	}
	// WithArgs comes after WithTLS's own arguments, so it wins.
	redis := redistest.Standalone(t, redistest.WithTLS(a, redistest.ClientCertRequired), redistest.WithArgs("--tls-ca-cert-file", both))
	cert, key := filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
	b.WriteClientCert(t, cert, key)
	in := startServe(t, "-redis", "rediss://"+redis.Addr, "-timeout", "5s",
		"-redis-tls-ca", a.CAFile, "-redis-tls-cert", cert, "-redis-tls-key", key)
	if ok, body := decided(t, in, "before"); !ok {
		t.Fatalf("with CA B's certificate: %s", body)
	}
	killClients := func() {
		t.Helper()
		if n, err := strconv.Atoi(redis.MustCLI(t, "CLIENT", "KILL", "TYPE", "normal")); err != nil || n < 1 {
			t.Fatalf("CLIENT KILL killed %d connections (%v), want serve's", n, err)
		}
	}

	// A key file that cannot be read, as in the middle of a renewal: the
	// next connection presents the last certificate read, and says so.
	if err := os.WriteFile(key, []byte("half written"), 0o600); err != nil {
		t.Fatal(err)
	}
	killClients()
	waitUntil(t, 10*time.Second, func() bool {
		ok, _ := decided(t, in, "unreadable")
		return ok && strings.Contains(in.stderr.String(), "client certificate unreadable; presenting the last one read")
	})

	b.WriteClientCert(t, cert, key) // whole again, for the check below
	oldCert, oldKey := filepath.Join(dir, "old.pem"), filepath.Join(dir, "old-key.pem")
	copyFile(t, cert, oldCert)
	copyFile(t, key, oldKey)
	a.WriteClientCert(t, cert, key)
	redis.MustCLI(t, "CONFIG", "SET", "tls-ca-cert-file", a.CAFile)
	// The test can fail: the old certificate is now refused.
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "redis-cli", "--tls", "--cacert", a.CAFile, "--cert", oldCert, "--key", oldKey,
		"-p", strconv.Itoa(redis.Port), "PING").CombinedOutput()
	if err == nil && strings.Contains(string(out), "PONG") {
		t.Fatalf("PING with CA B's certificate after trusting CA A alone = %q, want a refusal", out)
	}
	killClients()
	waitUntil(t, 10*time.Second, func() bool {
		ok, _ := decided(t, in, "after")
		return ok
	})
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
