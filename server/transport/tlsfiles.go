package transport

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// TLSFiles is TLS on the HTTP and gRPC listeners (floodgate serve's
// -tls-cert, -tls-key and -tls-client-ca), and with a client CA mutual
// TLS (every client presents a certificate that CA signed). The files are looked at again
// at a handshake once a second has passed since the last look, and read
// again when their size or modification time changed, so a renewed
// certificate or CA bundle (cert-manager, a Vault agent, a Secret update)
// takes effect without a restart; files that no longer load leave the
// last good ones in force, and log says why.
type TLSFiles struct {
	certFile, keyFile, caFile string
	log                       *slog.Logger

	mu      sync.Mutex
	checked time.Time
	stamp   string
	cert    *tls.Certificate
	pool    *x509.CertPool // nil without a client CA
}

// NewTLSFiles reads the certificate, its key and, unless caFile is
// empty, the client CAs; an error names the flag and the file. It
// returns nil without a certificate.
func NewTLSFiles(certFile, keyFile, caFile string, log *slog.Logger) (*TLSFiles, error) {
	if certFile == "" {
		return nil, nil
	}
	l := &TLSFiles{certFile: certFile, keyFile: keyFile, caFile: caFile, log: log}
	cert, pool, err := l.read()
	if err != nil {
		return nil, err
	}
	l.cert, l.pool, l.stamp, l.checked = cert, pool, fileStamp(certFile, keyFile, caFile), time.Now()
	return l, nil
}

func (l *TLSFiles) read() (*tls.Certificate, *x509.CertPool, error) {
	cert, err := tls.LoadX509KeyPair(l.certFile, l.keyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("-tls-cert %s, -tls-key %s: %w", l.certFile, l.keyFile, err)
	}
	if l.caFile == "" {
		return &cert, nil, nil
	}
	pem, err := os.ReadFile(l.caFile)
	if err != nil {
		return nil, nil, fmt.Errorf("-tls-client-ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, nil, fmt.Errorf("-tls-client-ca %s: no PEM certificate in it", l.caFile)
	}
	return &cert, pool, nil
}

// current returns the certificate and client CAs in force, reading the
// files again if they changed.
func (l *TLSFiles) current() (*tls.Certificate, *x509.CertPool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if time.Since(l.checked) < time.Second {
		return l.cert, l.pool
	}
	l.checked = time.Now()
	stamp := fileStamp(l.certFile, l.keyFile, l.caFile)
	if stamp == l.stamp {
		return l.cert, l.pool
	}
	cert, pool, err := l.read()
	if err != nil {
		// Between the writes of a certificate and of its key the pair does
		// not match: look again at the next handshake.
		l.log.Warn("listener TLS files unreadable; the last ones read stay in force", "error", err)
		return l.cert, l.pool
	}
	l.stamp, l.cert, l.pool = stamp, cert, pool
	l.log.Info("listener TLS files reloaded")
	return l.cert, l.pool
}

// Config is the tls.Config of a listener that negotiates protos (ALPN):
// "h2" and "http/1.1" for HTTP, "h2" for gRPC.
func (l *TLSFiles) Config(protos ...string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: protos,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			cert, pool := l.current()
			c := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: protos, Certificates: []tls.Certificate{*cert}}
			if pool != nil {
				c.ClientCAs, c.ClientAuth = pool, tls.RequireAndVerifyClientCert
			}
			return c, nil
		},
	}
}
