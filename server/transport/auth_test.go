package transport_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/server/transport"
)

// tokenFile is a file of content, a token file.
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
		if _, err := transport.LoadAuth(f, ""); err == nil || !strings.Contains(err.Error(), f) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("LoadAuth of %q: %v, want %q naming the file", tc.content, err, tc.want)
		}
	}
	if _, err := transport.LoadAuth(filepath.Join(t.TempDir(), "missing"), ""); err == nil {
		t.Error("LoadAuth of a missing file: no error")
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
		auth, err := transport.LoadAuth(path, path)
		if err != nil {
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error not naming the file: %v", err)
			}
			return
		}
		// try is what a caller of an admin route presenting token gets, as
		// HTTP answers it: 204 when let in, 401 unknown, 403 forbidden.
		try := func(token string) int {
			switch unauth, err := auth.Allowed("Bearer "+token, transport.ScopeAdmin); {
			case err == nil:
				return http.StatusNoContent
			case unauth:
				return http.StatusUnauthorized
			default:
				return http.StatusForbidden
			}
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

// TestBearerSchemeCaseInsensitive: the scheme of an Authorization value
// is case-insensitive (RFC 9110 section 11.1), so "bearer" and "BEARER"
// are "Bearer"; the token itself is not.
func TestBearerSchemeCaseInsensitive(t *testing.T) {
	const tok = "client-0123456789abcdef"
	auth, err := transport.LoadAuth(tokenFile(t, tok+"\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	for header, want := range map[string]bool{
		"Bearer " + tok:                  true,
		"bearer " + tok:                  true,
		"BEARER " + tok:                  true,
		"bEaReR   " + tok:                true,
		"Bearer " + strings.ToUpper(tok): false,
		"Basic " + tok:                   false,
		"Bearer" + tok:                   false,
		tok:                              false,
	} {
		if _, err := auth.Allowed(header, transport.ScopeClient); (err == nil) != want {
			t.Errorf("Allowed(%q): %v, want allowed %v", header, err, want)
		}
	}
}
