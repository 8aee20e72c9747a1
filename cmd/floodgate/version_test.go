package main

import (
	"bytes"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersionLine(t *testing.T) {
	platform := runtime.GOOS + "/" + runtime.GOARCH
	for _, tc := range []struct {
		name string
		info *debug.BuildInfo
		ok   bool
		want string
	}{
		{"go install of a tag", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/floodgate-rl/floodgate", Version: "v0.3.0"}},
			true, "floodgate v0.3.0 go1.26.8 " + platform},
		{"checkout with changes", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0f291d5a3c1e0123456789abcdef"}, {Key: "vcs.time", Value: "2026-01-10T12:00:00Z"}, {Key: "vcs.modified", Value: "true"}}},
			true, "floodgate (devel) rev 0f291d5a3c1e (2026-01-10T12:00:00Z, modified) go1.26.8 " + platform},
		{"clean checkout", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.modified", Value: "false"}}},
			true, "floodgate (devel) rev abc go1.26.8 " + platform},
		{"no build info", nil, false, "floodgate (unknown) " + runtime.Version() + " " + platform},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := versionLine(tc.info, tc.ok); got != tc.want {
				t.Errorf("versionLine = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestVersionCommand: "version", "--version" and "-version" all print one
// line naming floodgate and the Go version, on stdout, exit 0.
func TestVersionCommand(t *testing.T) {
	for _, arg := range []string{"version", "--version", "-version"} {
		var stdout, stderr bytes.Buffer
		if code := run(t.Context(), []string{arg}, &stdout, &stderr); code != 0 {
			t.Fatalf("%s: exit %d, stderr %q", arg, code, &stderr)
		}
		out := stdout.String()
		if !strings.HasPrefix(out, "floodgate ") || !strings.Contains(out, runtime.Version()) || strings.Count(out, "\n") != 1 {
			t.Errorf("%s printed %q, want one line starting with floodgate and naming %s", arg, out, runtime.Version())
		}
		if stderr.Len() != 0 {
			t.Errorf("%s wrote to stderr: %q", arg, &stderr)
		}
	}
	var stdout, stderr bytes.Buffer
	if code := run(t.Context(), []string{"version", "extra"}, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), `"extra"`) {
		t.Errorf("version extra: exit %d, stderr %q; want 2 naming the argument", code, &stderr)
	}
}
