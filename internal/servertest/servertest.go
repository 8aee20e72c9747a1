// Package servertest builds what the tests of the service's packages
// (server/rlqs, server/ui, ...) start from: a config from YAML, and a
// server.Server of it on a memory store, and its HTTP API. It is for
// tests only.
package servertest

import (
	"net/http"
	"testing"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/server"
	"github.com/floodgate-rl/floodgate/server/httpapi"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

// Config is yaml as the one config file name, or fails t.
func Config(t testing.TB, name, yaml string) *config.Config {
	t.Helper()
	d, err := config.Parse(name, []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.New(d)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// New returns a server of the rules of yaml (the file name) with opts, on
// a memory store closed when t ends unless opts has a Store, or fails t.
func New(t testing.TB, name, yaml string, opts server.Options) *server.Server {
	t.Helper()
	opts.Config = Config(t, name, yaml)
	if opts.Store == nil {
		store := memstore.New(nil)
		t.Cleanup(func() { store.Close() })
		opts.Store = store
	}
	srv, err := server.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

// Handler is the HTTP API of srv (server/httpapi) with extra, every
// route open, or fails t.
func Handler(t testing.TB, srv *server.Server, extra map[string]http.Handler) http.Handler {
	t.Helper()
	api, err := httpapi.New(srv, nil)
	if err != nil {
		t.Fatal(err)
	}
	return api.Handler(extra)
}
