package main

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// imageRootfsEnv names the exported root filesystem of the image
// (scripts/image --rootfs DIR) that TestImageRootfs runs.
const imageRootfsEnv = "FLOODGATE_IMAGE_ROOTFS"

// TestImageRootfs runs the image's /bin/ratelimit, from its exported root
// filesystem, as Envoy Gateway's managed deployment starts it: by that
// name, with its environment and nothing inherited. With CONFIG_TYPE=FILE
// (the config of RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config) it answers
// /healthcheck, decides Envoy's requests by the files, serves the metrics
// on PROMETHEUS_ADDR, and exits 0 on SIGTERM. With Envoy Gateway's own
// CONFIG_TYPE=GRPC_XDS_SOTW, TLS on gRPC and tracing, it does the same
// with the config go-control-plane's xDS server pushes over mutual TLS,
// and exports the decisions' traces to the test's OTLP receiver at
// OTEL_EXPORTER_OTLP_ENDPOINT. Containers cannot run on the machines that
// build the image; the binary, the link and the files are the image's own.
func TestImageRootfs(t *testing.T) {
	rootfs := os.Getenv(imageRootfsEnv)
	if rootfs == "" {
		t.Skipf("%s is unset: scripts/image --rootfs DIR builds the image and exports its root filesystem into DIR", imageRootfsEnv)
	}
	bin := filepath.Join(rootfs, "bin", "ratelimit")
	if target, err := os.Readlink(bin); err != nil || target != "floodgate" {
		t.Fatalf("%s: link to %q (%v), want floodgate", bin, target, err)
	}
	// Static: no interpreter, so it runs FROM scratch.
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s has an ELF interpreter: not a static binary", bin)
		}
	}
	f.Close()
	caBundle := filepath.Join(rootfs, "etc/ssl/certs/ca-certificates.crt")

	t.Run("file", func(t *testing.T) {
		env := envoyGatewayEnv(runtimeTree(t, upstreamYAML), "")
		env["SSL_CERT_FILE"] = caBundle
		in, stop := startImage(t, bin, env)
		checkRatelimit(t, in, "image")
		if code := stop(); code != 0 {
			t.Errorf("exit %d on SIGTERM, want 0; stderr:\n%s", code, in.stderr)
		}
	})
	t.Run("xds", func(t *testing.T) {
		e := newEGXDS(t, "http/protobuf")
		e.env["SSL_CERT_FILE"] = caBundle
		in, stop := startImage(t, bin, e.env)
		e.check(t, in)
		if code := stop(); code != 0 {
			t.Fatalf("exit %d on SIGTERM, want 0; stderr:\n%s", code, in.stderr)
		}
		e.checkTrace(t, egNamespace)
	})
}

// startImage runs bin with env alone and reads the lines it prints when it
// serves; the returned func sends SIGTERM and returns the exit code.
func startImage(t *testing.T, bin string, env map[string]string) (*ratelimitInstance, func() int) {
	t.Helper()
	cmd := exec.Command(bin)
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan int, 1)
	go func() {
		err := cmd.Wait()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			code = -1
		}
		exited <- code
	}()
	var once sync.Once
	exit := -1
	stop := func() int {
		once.Do(func() {
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				return // already exited and waited for (readServing said so)
			}
			select {
			case exit = <-exited:
			case <-time.After(20 * time.Second):
				t.Errorf("no exit within 20s of SIGTERM; stderr:\n%s", stderr)
				cmd.Process.Kill()
				<-exited
			}
		})
		return exit
	}
	t.Cleanup(func() { stop() })
	_, withProm := env["USE_PROMETHEUS"]
	return readServing(t, stdout, withProm, exited, stderr), stop
}
