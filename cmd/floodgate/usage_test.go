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
