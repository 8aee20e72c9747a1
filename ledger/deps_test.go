package ledger_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestStandardLibraryOnly: the ledger's contract imports the standard
// library and the root package only (with the pure arithmetic it uses:
// algorithm, share; its conformance suite also the
// memory store, which imports nothing else); the database drivers live in
// ledger/postgres and ledger/sqlite, which a user who does not import them
// never builds.
func TestStandardLibraryOnly(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	const mod = "github.com/floodgate-rl/floodgate"
	allowed := map[string]bool{mod: true, mod + "/algorithm": true, mod + "/ledger": true, mod + "/store/memstore": true, mod + "/internal/loop": true, mod + "/internal/direct": true, mod + "/share": true}
	for _, pkg := range []string{".", "./ledgertest"} {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			if !allowed[dep] && dep != mod+"/ledger/ledgertest" {
				t.Errorf("%s imports %s, which is neither the standard library nor floodgate's root", pkg, dep)
			}
		}
	}
}
