package floodgate_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestStandardLibraryOnly keeps the promise of the package docs: a library
// user who imports the root package, the algorithms or the memory store
// downloads nothing but this module. Redis, gRPC, YAML and Prometheus live
// in other packages.
func TestStandardLibraryOnly(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	const mod = "github.com/floodgate-rl/floodgate"
	allowed := map[string]bool{mod: true, mod + "/algorithm": true, mod + "/store/memstore": true, mod + "/floodgatetest": true, mod + "/internal/loop": true}
	for _, pkg := range []string{".", "./algorithm", "./store/memstore", "./floodgatetest"} {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			if !allowed[dep] {
				t.Errorf("%s imports %s, which is neither the standard library nor a package of the same layer", pkg, dep)
			}
		}
	}
}

// TestBinaryLinksNoTestCode: the floodgate binary links no testing package
// and none of the project's test support (floodgatetest, internal/…test
// helpers), so a deployment runs none of it.
func TestBinaryLinksNoTestCode(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}} {{.Standard}}", "./cmd/floodgate").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps ./cmd/floodgate: %v\n%s", err, out)
	}
	for line := range strings.Lines(string(out)) {
		dep, standard, _ := strings.Cut(strings.TrimSpace(line), " ")
		if dep == "testing" || strings.HasPrefix(dep, "testing/") ||
			standard == "false" && strings.HasPrefix(dep, "github.com/floodgate-rl/floodgate/") && strings.HasSuffix(dep, "test") {
			t.Errorf("cmd/floodgate links %s", dep)
		}
	}
}
