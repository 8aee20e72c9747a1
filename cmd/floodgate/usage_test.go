package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
)

// serveFlags is the FlagSet serve parses, every flag registered.
func serveFlags() *flag.FlagSet {
	var c serveConfig
	return c.flags(io.Discard)
}

// TestServeUsage: serve -h shows the primary flags, each on one line, and
// says how many more there are and where; each primary flag exists.
func TestServeUsage(t *testing.T) {
	fs := serveFlags()
	var stdout, stderr bytes.Buffer
	if got := run(t.Context(), []string{"serve", "-h"}, &stdout, &stderr); got != 0 {
		t.Fatalf("serve -h: exit code %d, want 0\n%s", got, &stderr)
	}
	help := stderr.String()
	for _, p := range servePrimary {
		if fs.Lookup(p.name) == nil {
			t.Errorf("primary flag -%s is not a flag of serve", p.name)
		}
		if !regexp.MustCompile(`(?m)^  -` + regexp.QuoteMeta(p.name) + ` .*` + regexp.QuoteMeta(p.help)).MatchString(help) {
			t.Errorf("serve -h lacks a line for -%s with %q:\n%s", p.name, p.help, help)
		}
	}
	more := fmt.Sprintf("%d more flags", countFlags(fs)-len(servePrimary))
	for _, want := range []string{more, "docs/serve.md", "-help-all"} {
		if !strings.Contains(help, want) {
			t.Errorf("serve -h lacks %q:\n%s", want, help)
		}
	}
	if n := strings.Count(help, "\n"); n > 40 {
		t.Errorf("serve -h is %d lines, want at most 40:\n%s", n, help)
	}
}

// TestServeHelpAll: serve -help-all prints every flag, wherever it stands
// before "--", and starts nothing.
func TestServeHelpAll(t *testing.T) {
	for _, args := range [][]string{{"serve", "-help-all"}, {"serve", "-redis", "redis://x", "--help-all"}} {
		var stdout, stderr bytes.Buffer
		if got := run(t.Context(), args, &stdout, &stderr); got != 0 {
			t.Fatalf("%v: exit code %d, want 0\n%s", args, got, &stderr)
		}
		serveFlags().VisitAll(func(f *flag.Flag) {
			if !strings.Contains(stderr.String(), "  -"+f.Name+" ") && !strings.Contains(stderr.String(), "  -"+f.Name+"\n") {
				t.Errorf("%v lacks -%s", args, f.Name)
			}
		})
	}
	if helpAll([]string{"--", "-help-all"}) {
		t.Error("helpAll read an argument after --")
	}
}

// TestServeDocListsEveryFlag holds docs/serve.md to the flags serve
// defines: one table row per flag, with its environment variable and its
// default, and no row for a flag that does not exist.
func TestServeDocListsEveryFlag(t *testing.T) {
	b, err := os.ReadFile("../../docs/serve.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	for _, m := range regexp.MustCompile("(?m)^\\| `-([a-z0-9-]+)`.*$").FindAllStringSubmatch(string(b), -1) {
		if _, dup := rows[m[1]]; dup {
			t.Errorf("docs/serve.md: -%s has two rows", m[1])
		}
		rows[m[1]] = m[0]
	}
	fs := serveFlags()
	fs.VisitAll(func(f *flag.Flag) {
		row, ok := rows[f.Name]
		if !ok {
			t.Errorf("docs/serve.md has no row for -%s", f.Name)
			return
		}
		env := "`FLOODGATE_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_")) + "`"
		if !strings.Contains(row, env) {
			t.Errorf("docs/serve.md: the row of -%s lacks %s:\n%s", f.Name, env, row)
		}
		if d := f.DefValue; d != "" && d != "0" && d != "false" && d != "0s" && !strings.Contains(row, "`"+d+"`") {
			t.Errorf("docs/serve.md: the row of -%s lacks its default `%s`:\n%s", f.Name, d, row)
		}
	})
	for name := range rows {
		if fs.Lookup(name) == nil {
			t.Errorf("docs/serve.md has a row for -%s, which serve does not define", name)
		}
	}
}

// TestMaxMemoryFlag: -max-memory reads sizes with units and auto, and
// refuses anything else naming the flag; auto is a quarter of the
// process's memory, within its bounds.
func TestMaxMemoryFlag(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "1048576": 1 << 20, "512MiB": 512 << 20, "2GiB": 2 << 30, "64KiB": 64 << 10, "100B": 100} {
		var m memSize
		if err := m.Set(in); err != nil || m.resolve() != want {
			t.Errorf("Set(%q): %d, %v; want %d", in, m.resolve(), err, want)
		}
	}
	for _, in := range []string{"", "-1", "1.5GiB", "1GB", "lots", "9999999999GiB"} {
		var m memSize
		if err := m.Set(in); err == nil {
			t.Errorf("Set(%q): no error", in)
		}
	}
	for limit, want := range map[int64]int64{0: 1 << 30, 100 << 20: 64 << 20, 8 << 30: 2 << 30, 64 << 30: 4 << 30} {
		if got := autoMaxMemory(limit); got != want {
			t.Errorf("autoMaxMemory(%d) = %d, want %d", limit, got, want)
		}
	}
	if n := (memSize{auto: true}).resolve(); n < 64<<20 || n > 4<<30 {
		t.Errorf("auto on this machine: %d, want between 64 MiB and 4 GiB", n)
	}
	code, _, stderr := runCmd(t, "serve", "-max-memory", "lots")
	if code != 2 || !strings.Contains(stderr, "-max-memory") {
		t.Errorf("serve -max-memory lots: exit %d, %s", code, stderr)
	}
}
