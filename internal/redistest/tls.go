package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// certValidity is how long the certificates of NewCerts are valid, from an
// hour before they are made (so a clock a little behind still accepts
// them).
const certValidity = 24 * time.Hour

// Certs are the TLS certificates of a test, made in Go when the test runs
// and written as PEM files to a t.TempDir: a CA, a server certificate it
// signed for 127.0.0.1, ::1 and "localhost", and a client certificate it
// signed. Make them with NewCerts and start servers with WithTLS. Every key
// is ECDSA P-256. The fields are read-only.
type Certs struct {
	// CAFile holds the CA certificate: what a client trusts to verify the
	// server, and what a server started WithTLS trusts to verify clients.
	CAFile string
	// ServerCertFile and ServerKeyFile are the server's certificate and
	// key. The certificate is also valid for client authentication, since
	// Redis presents it on the connections it opens itself: a replica to
	// its master, a cluster node to the others on the bus.
	ServerCertFile, ServerKeyFile string
	// ClientCertFile and ClientKeyFile are a client certificate and key,
	// which Server.CLI presents.
	ClientCertFile, ClientKeyFile string

	dir    string
	ca     *x509.Certificate
	caKey  *ecdsa.PrivateKey
	caPEM  []byte
	client tls.Certificate
}

// NewCerts makes a CA and the certificates it signs, and writes them to a
// new t.TempDir. It fails the test if it cannot.
func NewCerts(t testing.TB) *Certs {
	t.Helper()
	c, err := newCerts(t.TempDir())
	if err != nil {
		t.Fatalf("redistest: NewCerts: %v", err)
	}
	return c
}

func newCerts(dir string) (*Certs, error) {
	c := &Certs{
		dir:            dir,
		CAFile:         filepath.Join(dir, "ca.pem"),
		ServerCertFile: filepath.Join(dir, "server.pem"),
		ServerKeyFile:  filepath.Join(dir, "server-key.pem"),
		ClientCertFile: filepath.Join(dir, "client.pem"),
		ClientKeyFile:  filepath.Join(dir, "client-key.pem"),
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl, err := template("floodgate test CA")
	if err != nil {
		return nil, err
	}
	tmpl.IsCA = true
	tmpl.BasicConstraintsValid = true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	if c.ca, err = x509.ParseCertificate(der); err != nil {
		return nil, err
	}
	c.caKey = key
	c.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := os.WriteFile(c.CAFile, c.caPEM, 0o644); err != nil {
		return nil, err
	}
	if err := c.issue(c.ServerCertFile, c.ServerKeyFile, "floodgate test server", true); err != nil {
		return nil, err
	}
	if err := c.issue(c.ClientCertFile, c.ClientKeyFile, "floodgate test client", false); err != nil {
		return nil, err
	}
	if c.client, err = tls.LoadX509KeyPair(c.ClientCertFile, c.ClientKeyFile); err != nil {
		return nil, err
	}
	return c, nil
}

// template returns a certificate template with a random serial number,
// valid from an hour ago for certValidity.
func template(cn string) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(certValidity),
	}, nil
}

// issue writes a new key and a certificate for it, signed by the CA: a
// server certificate (for 127.0.0.1, ::1 and localhost, valid for server
// and client authentication) or a client certificate.
func (c *Certs) issue(certFile, keyFile, cn string, server bool) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl, err := template(cn)
	if err != nil {
		return err
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	if server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		tmpl.DNSNames = []string{"localhost"}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.ca, &key.PublicKey, c.caKey)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	// The key first, then the certificate, each replaced whole by a rename,
	// so that a reader never sees half a file.
	if err := writeAtomic(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return err
	}
	return writeAtomic(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

// writeAtomic writes data to a temporary file beside path and renames it
// over path.
func writeAtomic(path string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// WriteClientCert writes a new client key and certificate signed by the
// CA to keyFile and certFile, replacing each file whole (by a rename), the
// key first: for tests of certificate rotation, with files of the test's
// own (Server.CLI presents ClientCertFile). It fails the test if it
// cannot.
func (c *Certs) WriteClientCert(t testing.TB, certFile, keyFile string) {
	t.Helper()
	if err := c.issue(certFile, keyFile, "floodgate test client", false); err != nil {
		t.Fatalf("redistest: WriteClientCert: %v", err)
	}
}

// CAPEM returns the CA certificate in PEM, as in CAFile: to build a bundle
// of several CAs.
func (c *Certs) CAPEM() []byte {
	return append([]byte(nil), c.caPEM...)
}

// Pool returns a new certificate pool holding the CA.
func (c *Certs) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(c.ca)
	return p
}

// ClientConfig returns a new TLS configuration that verifies a server
// against the CA (and so trusts nothing else) and presents the client
// certificate that NewCerts wrote to ClientCertFile.
func (c *Certs) ClientConfig() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		RootCAs:      c.Pool(),
		Certificates: []tls.Certificate{c.client},
	}
}

// ClientAuth is whether a server started WithTLS asks its clients for a
// certificate: redis-server's tls-auth-clients.
type ClientAuth string

const (
	// ClientCertRequired refuses a client without a certificate signed by
	// the CA (tls-auth-clients yes, Redis's default).
	ClientCertRequired ClientAuth = "yes"
	// ClientCertOptional accepts a client without a certificate, but
	// refuses one whose certificate the CA did not sign
	// (tls-auth-clients optional).
	ClientCertOptional ClientAuth = "optional"
	// ClientCertNone never asks for a certificate (tls-auth-clients no).
	ClientCertNone ClientAuth = "no"
)

// WithTLS makes a server listen with TLS only, on its Port (there is no
// plain port: --port 0 --tls-port <Port>), presenting certs' server
// certificate and verifying clients' certificates against certs' CA as
// auth says. A replica connects to its master, and with StartCluster a
// node to the others on the cluster bus, over TLS too. Server.CLI and the
// helpers then speak TLS, trusting certs' CA and presenting its client
// certificate; Server.TLS holds certs.
func WithTLS(certs *Certs, auth ClientAuth) Option {
	return func(o *options) {
		o.tls = certs
		o.clientAuth = auth
	}
}

// tlsArgs returns the command-line arguments of a TLS data node that
// listens on port, or nil without TLS.
func (o options) tlsArgs(port int, cluster bool) []string {
	if o.tls == nil {
		return nil
	}
	auth := o.clientAuth
	if auth == "" {
		auth = ClientCertRequired
	}
	args := []string{
		"--port", "0",
		"--tls-port", fmt.Sprint(port),
		"--tls-cert-file", o.tls.ServerCertFile,
		"--tls-key-file", o.tls.ServerKeyFile,
		"--tls-ca-cert-file", o.tls.CAFile,
		"--tls-auth-clients", string(auth),
		// A replica reaches its master on its TLS port: there is no other.
		"--tls-replication", "yes",
	}
	if cluster {
		args = append(args, "--tls-cluster", "yes")
	}
	return args
}

// cliTLSArgs returns the arguments that make redis-cli speak TLS to a
// server with certs, or nil when certs is nil.
func cliTLSArgs(certs *Certs) []string {
	if certs == nil {
		return nil
	}
	return []string{"--tls", "--cacert", certs.CAFile, "--cert", certs.ClientCertFile, "--key", certs.ClientKeyFile}
}
