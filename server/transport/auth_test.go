package server_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/server"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

func tokenFile(t *testing.T, content string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(f, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestLoadAuthErrors: a token file that would let the wrong callers in, or
// nobody, is refused, naming the file and the line.
func TestLoadAuthErrors(t *testing.T) {
	for _, tc := range []struct{ content, want string }{
		{"# only a comment\n\n", "no token"},
		{"0123456789abcdef\nshort\n", ":2: a token of 5 bytes, want at least 16"},
		{"0123456789abcdef 0123456789abcdef\n", ":1: a token holds a space"},
	} {
		f := tokenFile(t, tc.content)
		if _, err := server.LoadAuth(f, ""); err == nil || !strings.Contains(err.Error(), f) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("LoadAuth of %q: %v, want %q naming the file", tc.content, err, tc.want)
		}
	}
	if _, err := server.LoadAuth(filepath.Join(t.TempDir(), "missing"), ""); err == nil {
		t.Error("LoadAuth of a missing file: no error")
	}
}

// TestAuthScopes: only admin tokens reach the admin routes; with only an
// admin file, decisions stay open; /readyz keeps the store's error for
// admins (it names the store's address).
func TestAuthScopes(t *testing.T) {
	const client, admin = "client-0123456789abcdef", "admin-0123456789abcdef"
	store := memstore.New(nil)
	defer store.Close()
	auth, err := server.LoadAuth("", tokenFile(t, admin+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Options{Store: unreachable{store}, Config: parseConfig(t, localYAML), Auth: auth,
		Limiter: floodgate.Options{FailurePolicy: floodgate.FailOpen}})
	if err != nil {
		t.Fatal(err)
	}
	h := srv.Handler(nil)
	do := func(method, path, body, token string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, path, strings.NewReader(body))
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		return rec
	}
	if rec := do("POST", "/v1/allow", `{"key": "k", "limit": {"limit": 2, "period": "1m"}}`, ""); rec.Code != http.StatusOK {
		t.Errorf("allow without a client file: %d %s, want 200", rec.Code, rec.Body)
	}
	if rec := do("GET", "/v1/config", "", client); rec.Code != http.StatusUnauthorized {
		t.Errorf("config with an unknown token: %d, want 401", rec.Code)
	}
	if rec := do("GET", "/v1/config", "", ""); rec.Code != http.StatusUnauthorized {
		t.Errorf("config without a token: %d, want 401", rec.Code)
	}
	if rec := do("GET", "/v1/config", "", admin); rec.Code != http.StatusOK {
		t.Errorf("config with the admin token: %d, want 200", rec.Code)
	}
	if rec := do("GET", "/readyz", "", ""); rec.Code != http.StatusServiceUnavailable || strings.Contains(rec.Body.String(), "dial tcp") {
		t.Errorf("/readyz without a token: %d %q, want 503 without the store's error", rec.Code, rec.Body)
	}
	if rec := do("GET", "/readyz", "", admin); rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "dial tcp") {
		t.Errorf("/readyz with the admin token: %d %q, want 503 with the store's error", rec.Code, rec.Body)
	}
	r := httptest.NewRequest("GET", "/v1/config", nil)
	r.Header.Set("Authorization", "Basic YWRtaW46eA==")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	if rec.Code != http.StatusUnauthorized || !strings.Contains(rec.Body.String(), "Bearer") {
		t.Errorf("config with Basic auth: %d %s, want 401 saying Bearer", rec.Code, rec.Body)
	}
}

// FuzzTokenFile: any token file either loads, and then every line it took
// as a token lets its bearer in and nothing else does, or is an error
// naming the file; never a panic.
func FuzzTokenFile(f *testing.F) {
	f.Add("0123456789abcdef\n# c\n\n  fedcba9876543210  \r\n")
	f.Add("short\n")
	f.Add("\x00\xff0123456789abcdef")
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, content string) {
		path := filepath.Join(dir, "tokens")
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		auth, err := server.LoadAuth(path, path)
		if err != nil {
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error not naming the file: %v", err)
			}
			return
		}
		h := auth.HTTP(server.ScopeAdmin, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
		try := func(token string) int {
			r := httptest.NewRequest("GET", "/", nil)
			r.Header.Set("Authorization", "Bearer "+token)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			return rec.Code
		}
		for line := range strings.Lines(content) {
			tok := strings.TrimSpace(line)
			if tok == "" || strings.HasPrefix(tok, "#") {
				continue
			}
			if got := try(tok); got != http.StatusNoContent {
				t.Errorf("token %q of the file: %d", tok, got)
			}
		}
		if got := try("not-in-the-file-" + content); got != http.StatusUnauthorized && !strings.Contains(content, "not-in-the-file-") {
			t.Errorf("a token not in the file: %d, want 401", got)
		}
	})
}
