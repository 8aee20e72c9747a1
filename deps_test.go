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
	allowed := map[string]bool{mod: true, mod + "/algorithm": true, mod + "/store/memstore": true, mod + "/floodgatetest": true, mod + "/internal/loop": true, mod + "/internal/direct": true, mod + "/share": true}
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

// TestLayers keeps imports pointing downward: no package under store/
// imports region, ledger or server (or a package under them), which are
// built on stores; and grant, the home protocol that region, the Redis
// store's rate slices and rlqs all use, imports none of those nor any
// store. Each package's whole import graph is checked, not only its
// direct imports.
func TestLayers(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	const mod = "github.com/floodgate-rl/floodgate"
	for _, c := range []struct {
		pattern   string
		forbidden []string
	}{
		{"./store/...", []string{mod + "/region", mod + "/ledger", mod + "/server"}},
		{"./grant/...", []string{mod + "/region", mod + "/ledger", mod + "/server", mod + "/store"}},
	} {
		out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Deps " "}}`, c.pattern).CombinedOutput()
		if err != nil {
			t.Fatalf("go list %s: %v\n%s", c.pattern, err, out)
		}
		pkgs := 0
		for line := range strings.Lines(string(out)) {
			fields := strings.Fields(line)
			if len(fields) == 0 {
				continue
			}
			pkgs++
			for _, dep := range fields[1:] {
				for _, f := range c.forbidden {
					if dep == f || strings.HasPrefix(dep, f+"/") {
						t.Errorf("%s imports %s (directly or through another package), a layer above it", fields[0], dep)
					}
				}
			}
		}
		if pkgs == 0 {
			t.Errorf("go list %s: no packages", c.pattern)
		}
	}
}
