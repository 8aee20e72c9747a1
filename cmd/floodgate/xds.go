package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"sync"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/config/xds"
	"github.com/floodgate-rl/floodgate/server"
)

// xdsFlags are serve's -config-xds flags: the config taken from an xDS
// management server (package config/xds) instead of files.
type xdsFlags struct {
	addr                      string
	node, cluster             string
	useTLS                    bool
	ca, cert, key, serverName string
	startWithoutConfig        bool

	// The fields of xds.Options that have no flag: zero in serve (the
	// package's defaults); `floodgate ratelimit` sets them from upstream's
	// settings (upstreamMode.configure).
	nodeMetadata, headers map[string]string
	maxRecvMsgSize        int
	backoff               xds.Backoff
}

func (f *xdsFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.addr, "config-xds", "", "take the config from the xDS management server at this `address` (host:port) instead of files: envoyproxy/ratelimit's RateLimitConfig resources, as its CONFIG_TYPE=GRPC_XDS_SOTW; each push replaces the whole config, a push that is not valid is refused (NACK) and the last good one kept; not with -config (env FLOODGATE_CONFIG_XDS)")
	fs.StringVar(&f.node, "config-xds-node", "default", "the node `id` the xDS server hands the config out to, as upstream's CONFIG_GRPC_XDS_NODE_ID (env FLOODGATE_CONFIG_XDS_NODE)")
	fs.StringVar(&f.cluster, "config-xds-cluster", "", "the node's `cluster`, sent to the xDS server beside -config-xds-node (env FLOODGATE_CONFIG_XDS_CLUSTER)")
	fs.BoolVar(&f.useTLS, "config-xds-tls", false, "connect to the xDS server over TLS, verified by the system's CAs or -config-xds-tls-ca; any -config-xds-tls-* file implies it (env FLOODGATE_CONFIG_XDS_TLS)")
	fs.StringVar(&f.ca, "config-xds-tls-ca", "", "PEM `file` of the CAs that verify the xDS server's certificate, in place of the system's; read at start (env FLOODGATE_CONFIG_XDS_TLS_CA)")
	fs.StringVar(&f.cert, "config-xds-tls-cert", "", "PEM `file` of the client certificate presented to the xDS server (mutual TLS), with -config-xds-tls-key; read again at each connection, so a renewed one needs no restart (env FLOODGATE_CONFIG_XDS_TLS_CERT)")
	fs.StringVar(&f.key, "config-xds-tls-key", "", "PEM `file` of the key of -config-xds-tls-cert (env FLOODGATE_CONFIG_XDS_TLS_KEY)")
	fs.StringVar(&f.serverName, "config-xds-tls-server-name", "", "the `name` the xDS server's certificate must hold, when it is not the host of -config-xds, as upstream's CONFIG_GRPC_XDS_SERVER_TLS_SAN (env FLOODGATE_CONFIG_XDS_TLS_SERVER_NAME)")
	fs.BoolVar(&f.startWithoutConfig, "config-xds-start-without-config", false, "serve before the first push from the xDS server has arrived, with no rules until it does (every request is allowed), as upstream's FORCE_START_WITHOUT_INITIAL_CONFIG; by default serve listens only once a first config is applied (env FLOODGATE_CONFIG_XDS_START_WITHOUT_CONFIG)")
}

// tls reports whether the connection is TLS.
func (f xdsFlags) tls() bool {
	return f.useTLS || f.ca != "" || f.cert != "" || f.key != "" || f.serverName != ""
}

// problem is the first problem of the flags, naming the flag, or "".
func (f xdsFlags) problem(configPath string) string {
	switch {
	case f.addr == "" && (f.tls() || f.cluster != "" || f.startWithoutConfig):
		return "-config-xds-*: needs -config-xds, the xDS server's address"
	case f.addr != "" && configPath != "":
		return "-config and -config-xds: give one (the config comes from files or from an xDS server, not both)"
	case f.addr != "" && f.node == "":
		return "-config-xds-node: empty (the xDS server hands configs out by node id)"
	case (f.cert == "") != (f.key == ""):
		return "-config-xds-tls-cert and -config-xds-tls-key: give both (the client certificate and its key) or neither"
	}
	return ""
}

// tlsConfig reads the files: nil without TLS. The CA bundle is read once;
// the client certificate at each connection, as for Redis (clientCert).
func (f xdsFlags) tlsConfig(log *slog.Logger) (*tls.Config, error) {
	if !f.tls() {
		return nil, nil
	}
	conf := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.serverName}
	if f.ca != "" {
		pem, err := os.ReadFile(f.ca)
		if err != nil {
			return nil, fmt.Errorf("-config-xds-tls-ca: %w", err)
		}
		conf.RootCAs = x509.NewCertPool()
		if !conf.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("-config-xds-tls-ca %s: no PEM certificate in it", f.ca)
		}
	}
	if f.cert != "" {
		l := &clientCert{certFile: f.cert, keyFile: f.key, flag: "-config-xds-tls", peer: "xDS", log: log}
		if _, err := l.load(); err != nil {
			return nil, err
		}
		conf.GetClientCertificate = l.get
	}
	return conf, nil
}

// start subscribes srv to the xDS server of the flags until ctx ends.
// Each push reloads the config as a changed file does (srv.ApplyConfig:
// the same checks, metrics and log); a push that does not convert counts
// as a failed reload. Unless -config-xds-start-without-config, it returns
// only once a first config is applied or ctx ends, so that serve does not
// listen without rules.
func (f xdsFlags) start(ctx context.Context, srv *server.Server, loader config.Loader, log *slog.Logger) error {
	tlsConf, err := f.tlsConfig(log)
	if err != nil {
		return err
	}
	first := make(chan struct{})
	var once sync.Once
	o := xds.Options{
		Address:        f.addr,
		NodeID:         f.node,
		Cluster:        f.cluster,
		NodeMetadata:   f.nodeMetadata,
		Headers:        f.headers,
		TLS:            tlsConf,
		MaxRecvMsgSize: f.maxRecvMsgSize,
		Backoff:        f.backoff,
		Loader:         loader,
		Apply: func(cfg *config.Config) error {
			if err := srv.ApplyConfig(cfg, "xds"); err != nil {
				return err
			}
			once.Do(func() { close(first) })
			return nil
		},
		Rejected: func(error) { srv.CountRejectedConfig() },
		Logger:   log,
	}
	go func() {
		if err := xds.Run(ctx, o); err != nil {
			log.Error("xds client stopped", "error", err)
		}
	}()
	if f.startWithoutConfig {
		return nil
	}
	log.Info("waiting for the first config from the xDS server", "addr", f.addr, "node", f.node)
	select {
	case <-first:
		return nil
	case <-ctx.Done():
		return nil // serve shuts down at once
	}
}
