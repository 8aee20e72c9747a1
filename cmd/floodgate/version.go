package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
)

// versionLine is what `floodgate version` prints: the module version the
// binary was built from ("(devel)" for a build in a checkout), then the VCS
// revision, its time and whether the tree had changes, when the build
// recorded them, and the Go version that built it:
//
//	floodgate v0.3.0 go1.26.8 linux/amd64
//	floodgate (devel) rev 0f291d5a3c1e (2026-01-10T12:00:00Z, modified) go1.26.8 linux/amd64
func versionLine(info *debug.BuildInfo, ok bool) string {
	version, goVersion := "(unknown)", runtime.Version()
	var extra []string
	if ok && info != nil {
		if info.Main.Version != "" {
			version = info.Main.Version
		}
		if info.GoVersion != "" {
			goVersion = info.GoVersion
		}
		var rev, at, modified string
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				at = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					modified = "modified"
				}
			}
		}
		if rev != "" {
			if len(rev) > 12 {
				rev = rev[:12]
			}
			r := "rev " + rev
			if detail := strings.Join(nonEmpty(at, modified), ", "); detail != "" {
				r += " (" + detail + ")"
			}
			extra = append(extra, r)
		}
	}
	parts := append([]string{"floodgate", version}, extra...)
	parts = append(parts, goVersion, runtime.GOOS+"/"+runtime.GOARCH)
	return strings.Join(parts, " ")
}

func nonEmpty(s ...string) []string {
	var out []string
	for _, v := range s {
		if v != "" {
			out = append(out, v)
		}
	}
	return out
}

// versionCmd is "floodgate version" (also --version and -version).
func versionCmd(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		fmt.Fprintf(stderr, "usage: floodgate version (takes no arguments; got %q)\n", args[0])
		return 2
	}
	fmt.Fprintln(stdout, versionLine(debug.ReadBuildInfo()))
	return 0
}
