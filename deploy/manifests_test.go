package deploy

import (
	"bytes"
	"flag"
	"os"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/releaseutil"
	corev1 "k8s.io/api/core/v1"
)

var update = flag.Bool("update", false, "rewrite manifests/floodgate.yaml from the chart")

// manifestsFile holds the plain manifests: the chart rendered with its
// default values and the example rules.
const manifestsFile = "manifests/floodgate.yaml"

const manifestsHeader = `# Floodgate's plain Kubernetes manifests: the Helm chart deploy/helm/floodgate
# rendered with its default values and the rules of examples/config/edge.yaml
# (release "floodgate", namespace "floodgate"): one replica on the embedded
# memory store. docs/kubernetes.md says what to change for Redis, tokens and
# more replicas. Generated, do not edit: after changing the chart, run
#   cd deploy && go test -run TestManifests -update
# (TestManifests fails while this file is behind the chart).
#
#   kubectl apply -f deploy/manifests/floodgate.yaml
---
apiVersion: v1
kind: Namespace
metadata:
  name: floodgate
  labels:
    # The pods meet the "restricted" Pod Security Standard; enforce it.
    pod-security.kubernetes.io/enforce: restricted
    pod-security.kubernetes.io/enforce-version: latest
`

// manifests renders the plain manifests.
func manifests(t *testing.T) []byte {
	t.Helper()
	rendered, err := render(valuesYAML(t, map[string]any{"rules": map[string]any{"edge": exampleRules(t)}}))
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	var b bytes.Buffer
	b.WriteString(manifestsHeader)
	for _, m := range rendered {
		b.WriteString("---\n")
		b.WriteString(strings.TrimSpace(m.Content))
		b.WriteString("\n")
	}
	return b.Bytes()
}

// TestManifests holds manifests/floodgate.yaml to the chart (-update
// rewrites it) and the file itself to every check of the chart's tests.
func TestManifests(t *testing.T) {
	want := manifests(t)
	if *update {
		if err := os.WriteFile(manifestsFile, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(manifestsFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is not the chart rendered with its default values; regenerate it: cd deploy && go test -run TestManifests -update", manifestsFile)
	}

	var objs []object
	for name, doc := range releaseutil.SplitManifests(string(got)) {
		if commentsOnly(doc) {
			continue
		}
		o, err := decode(manifestsFile+" "+name, doc)
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, o)
	}
	wantKinds := []string{"ConfigMap/floodgate-rules", "Deployment/floodgate", "Namespace/floodgate", "PodDisruptionBudget/floodgate", "Service/floodgate", "ServiceAccount/floodgate"}
	if got := kinds(objs); !equal(got, wantKinds) {
		t.Fatalf("objects %v, want %v", got, wantKinds)
	}
	ns := one[corev1.Namespace](t, objs)
	if ns.Labels["pod-security.kubernetes.io/enforce"] != "restricted" {
		t.Errorf("Namespace labels %v: want the restricted standard enforced", ns.Labels)
	}
	c := check(t, objs)
	cfg := loadRules(t, c.rulesDir)
	if d := cfg.Domain("edge"); d == nil {
		t.Error("the manifests' rules have no domain edge")
	}
}

func equal(a, b []string) bool {
	return strings.Join(a, "\n") == strings.Join(b, "\n")
}

// commentsOnly reports whether a YAML document holds nothing but comments
// and blank lines (the file's header).
func commentsOnly(doc string) bool {
	for line := range strings.SplitSeq(doc, "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			return false
		}
	}
	return true
}
