package main

import (
	"net/http"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/floodgate-rl/floodgate/server"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

// TestServeOpenAPI checks that the document serve publishes at GET
// /openapi.yaml is valid and describes the routes serve adds to the
// API's own (httpExtras). server/httpapi's TestOpenAPI drives every route
// and status of the document against the handler; this is the one part
// of it that only serve's wiring can tell.
func TestServeOpenAPI(t *testing.T) {
	in := startServe(t)
	resp, b := in.get(t, "/openapi.yaml")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/yaml" {
		t.Fatalf("GET /openapi.yaml: %d, Content-Type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	doc, err := openapi3.NewLoader().LoadFromData(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(t.Context()); err != nil {
		t.Fatalf("the served document is not valid: %v", err)
	}
	store := memstore.New(nil)
	t.Cleanup(func() { store.Close() })
	srv, err := server.New(server.Options{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	extras := httpExtras(envoyService(srv, true, parityFlags{}))
	if len(extras) == 0 {
		t.Fatal("httpExtras is empty; this test checks nothing")
	}
	for pattern := range extras {
		method, path, ok := strings.Cut(pattern, " ")
		if !ok {
			t.Errorf("serve registers %q for every method; the document describes methods", pattern)
			continue
		}
		if item := doc.Paths.Value(path); item == nil || item.GetOperation(method) == nil {
			t.Errorf("serve serves %s, which server/httpapi/openapi.yaml lacks", pattern)
		}
	}
}
