package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
)

// redisTLSFlags are serve's -redis-tls-* flags: files that make the TLS
// configuration of a rediss URL (redisstore.Options.TLS).
type redisTLSFlags struct {
	ca, cert, key, serverName string
}

// set reports whether any of the flags is set.
func (f redisTLSFlags) set() bool {
	return f.ca != "" || f.cert != "" || f.key != "" || f.serverName != ""
}

// check returns the problem of the flags as given, before any file is
// read, naming the flag; "" if there is none.
func (f redisTLSFlags) check(redisURL string) string {
	if !f.set() {
		return ""
	}
	var name string // the first flag set
	for _, fl := range [][2]string{{"-redis-tls-ca", f.ca}, {"-redis-tls-cert", f.cert}, {"-redis-tls-key", f.key}, {"-redis-tls-server-name", f.serverName}} {
		if fl[1] != "" {
			name = fl[0]
			break
		}
	}
	scheme, _, _ := strings.Cut(redisURL, "://")
	switch {
	case redisURL == "":
		return name + ": needs -redis with a rediss://, rediss-sentinel:// or rediss-cluster:// URL, not the memory store"
	case !strings.HasPrefix(strings.ToLower(scheme), "rediss"):
		return fmt.Sprintf("%s: needs TLS, but -redis is %s://; use rediss://, rediss-sentinel:// or rediss-cluster://", name, scheme)
	case (f.cert == "") != (f.key == ""):
		return "-redis-tls-cert and -redis-tls-key: give both (the client certificate and its key) or neither"
	}
	return ""
}

// config reads the files and returns the TLS configuration of the flags,
// or nil if none is set (the store's default: the system roots). Each
// error names the flag and the file.
//
// The CA bundle is read once: a new CA takes a restart. The client
// certificate is read again at each new connection (GetClientCertificate),
// so a renewed certificate (cert-manager, a Vault agent) takes effect on
// the next connection without a restart; Redis keeps a connection open
// for as long as it lives, and its certificate was checked when it was
// made. If the files cannot be read or do not match at a later
// connection, as between the writes of the certificate and of its key
// during a renewal, the last pair read is presented again and log tells
// why, rather than failing the connection outright: the old certificate
// is normally still valid while its successor is being written.
func (f redisTLSFlags) config(log *slog.Logger) (*tls.Config, error) {
	if !f.set() {
		return nil, nil
	}
	conf := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.serverName}
	if f.ca != "" {
		pem, err := os.ReadFile(f.ca)
		if err != nil {
			return nil, fmt.Errorf("-redis-tls-ca: %w", err)
		}
		conf.RootCAs = x509.NewCertPool()
		if !conf.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("-redis-tls-ca %s: no PEM certificate in it", f.ca)
		}
	}
	if f.cert != "" {
		l := &clientCert{certFile: f.cert, keyFile: f.key, flag: "-redis-tls", peer: "Redis", log: log}
		if _, err := l.load(); err != nil {
			return nil, err
		}
		conf.GetClientCertificate = l.get
	}
	return conf, nil
}

// clientCert reads a client certificate and its key at each TLS handshake
// that asks for one, keeping the last pair read for when the files fail.
type clientCert struct {
	certFile, keyFile string
	// flag is the flags' prefix ("-redis-tls": -redis-tls-cert and
	// -redis-tls-key) and peer the server, for the messages.
	flag, peer string
	log        *slog.Logger

	mu   sync.Mutex
	last *tls.Certificate
}

// load reads the pair and keeps it as the last one.
func (c *clientCert) load() (*tls.Certificate, error) {
	cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return nil, fmt.Errorf("%s-cert %s, %s-key %s: %w", c.flag, c.certFile, c.flag, c.keyFile, err)
	}
	c.mu.Lock()
	c.last = &cert
	c.mu.Unlock()
	return &cert, nil
}

// get is the tls.Config's GetClientCertificate.
func (c *clientCert) get(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	cert, err := c.load()
	if err == nil {
		return cert, nil
	}
	c.mu.Lock()
	last := c.last
	c.mu.Unlock()
	c.log.Warn(c.peer+" TLS client certificate unreadable; presenting the last one read", "error", err)
	return last, nil
}
