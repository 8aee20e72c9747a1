package deploy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// startBound bounds how long serve may take to build and start; it is a
// guard against a hang, not a measure.
const startBound = 5 * time.Minute

// TestServeRunsRenderedPod runs `floodgate serve` as the rendered pod
// would, on loopback: the container's arguments and environment, its
// volumes laid out as files (the ConfigMap of the example rules, the
// token and id key Secrets). It holds that serve accepts every flag the
// chart passes, that the probes' endpoints answer 200 on the probes'
// port, that the rules and tokens are in force, and that SIGTERM stops
// it cleanly.
func TestServeRunsRenderedPod(t *testing.T) {
	values := map[string]any{
		"rules":  map[string]any{"edge": exampleRules(t)},
		"auth":   map[string]any{"clientTokens": []any{clientToken}, "adminTokens": []any{adminToken}},
		"idKeys": map[string]any{"keys": []any{idKey}},
	}
	objs := renderObjects(t, valuesYAML(t, values))
	c := check(t, objs)

	bin := filepath.Join(t.TempDir(), "floodgate")
	build := exec.Command("go", "build", "-o", bin, "./cmd/floodgate")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/floodgate: %v\n%s", err, out)
	}

	// The pod's volumes, as files under root.
	root := t.TempDir()
	data := map[string]map[string]string{} // volume -> file -> content
	for _, s := range every[corev1.Secret](objs) {
		for _, v := range c.deployment.Spec.Template.Spec.Volumes {
			if v.Secret != nil && v.Secret.SecretName == s.Name {
				data[v.Name] = s.StringData
			}
		}
	}
	for _, cm := range every[corev1.ConfigMap](objs) {
		for _, v := range c.deployment.Spec.Template.Spec.Volumes {
			if v.ConfigMap != nil && v.ConfigMap.Name == cm.Name {
				data[v.Name] = cm.Data
			}
		}
	}
	for _, m := range c.container.VolumeMounts {
		dir := filepath.Join(root, m.MountPath)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, content := range data[m.Name] {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	ports := map[string]int32{}
	for _, p := range c.container.Ports {
		ports[p.Name] = p.ContainerPort
	}
	var args []string
	for _, a := range c.container.Args {
		switch {
		case a == fmt.Sprintf("-http=:%d", ports["http"]):
			a = "-http=127.0.0.1:0"
		case a == fmt.Sprintf("-grpc=:%d", ports["grpc"]):
			a = "-grpc=127.0.0.1:0"
		default:
			name, value, _ := strings.Cut(a, "=")
			if strings.HasPrefix(value, "/") {
				a = name + "=" + filepath.Join(root, value)
			}
		}
		args = append(args, a)
	}
	if len(c.env) != 0 {
		t.Fatalf("env %v: this pod should need none", c.env)
	}

	cmd := exec.Command(bin, args...)
	cmd.Env = []string{} // the container's environment: none
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-exited
		}
	})

	serving := regexp.MustCompile(`serving HTTP on (\S+), gRPC on (\S+),`)
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := serving.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	var httpAddr string
	select {
	case httpAddr = <-addr:
	case err := <-exited:
		t.Fatalf("serve exited before serving: %v\n%s", err, stderr.String())
	case <-time.After(startBound):
		t.Fatalf("serve did not start within %v\n%s", startBound, stderr.String())
	}

	client := &http.Client{Timeout: 30 * time.Second}
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := client.Get("http://" + httpAddr + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, p := range []*corev1.Probe{c.container.LivenessProbe, c.container.ReadinessProbe} {
		if code, body := get(p.HTTPGet.Path); code != http.StatusOK {
			t.Errorf("probe GET %s: %d %s", p.HTTPGet.Path, code, body)
		}
	}
	if code, body := get("/metrics"); code != http.StatusOK || !strings.Contains(body, "floodgate_config_rules") {
		t.Errorf("GET /metrics (the ServiceMonitor's path): %d, without floodgate_config_rules", code)
	}

	// A decision by the example rules, through the Service's name, with
	// and without a client token.
	allow := func(token string) (int, map[string]any) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, "http://"+httpAddr+"/v1/allow",
			strings.NewReader(`{"domain": "edge", "descriptors": [{"entries": [{"key": "user", "value": "hot"}]}]}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Host = "floodgate.floodgate.svc"
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("POST /v1/allow: %v", err)
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	if code, _ := allow(""); code != http.StatusUnauthorized {
		t.Errorf("POST /v1/allow without a token: %d, want 401 (the token Secret not in force?)", code)
	}
	code, out := allow(clientToken)
	if code != http.StatusOK || out["allowed"] != true || out["limit"] != float64(10) || out["remaining"] != float64(9) {
		t.Errorf("POST /v1/allow user=hot: %d %v, want allowed, limit 10 (rule hot_user of the ConfigMap), remaining 9", code, out)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("serve after SIGTERM: %v\n%s", err, stderr.String())
		}
	case <-time.After(startBound):
		t.Fatalf("serve did not stop within %v of SIGTERM", startBound)
	}
	if strings.Contains(stderr.String(), "level=ERROR") || strings.Contains(stderr.String(), `"level":"ERROR"`) {
		t.Errorf("serve logged an error:\n%s", stderr.String())
	}
}
