package main

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// imageRootfsEnv names the exported root filesystem of the image
// (scripts/image --rootfs DIR) that TestImageRootfs runs.
const imageRootfsEnv = "FLOODGATE_IMAGE_ROOTFS"

// TestImageRootfs runs the image's /bin/ratelimit, from its exported root
// filesystem, as Envoy Gateway's managed deployment starts it: by that
// name, with its environment (CONFIG_TYPE=FILE: the config of
// RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config) and nothing inherited. It
// answers /healthcheck, decides Envoy's requests by the files, serves the
// metrics on PROMETHEUS_ADDR, and exits 0 on SIGTERM. Containers cannot
// run on the machines that build the image; the binary, the link and the
// files are the image's own.
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

	env := envoyGatewayEnv(runtimeTree(t, upstreamYAML), "")
	env["SSL_CERT_FILE"] = filepath.Join(rootfs, "etc/ssl/certs/ca-certificates.crt")
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
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			cmd.Process.Kill()
			<-exited
		}
	})
	in := readServing(t, stdout, true, exited, stderr)
	checkRatelimit(t, in, "image")

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-exited:
		stopped = true
		if code != 0 {
			t.Errorf("exit %d on SIGTERM, want 0; stderr:\n%s", code, stderr)
		}
	case <-time.After(20 * time.Second):
		t.Errorf("no exit within 20s of SIGTERM; stderr:\n%s", stderr)
	}
}
