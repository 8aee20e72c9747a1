package redisstore

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate"
)

// TestScripts checks the embedded scripts: each algorithm's file has its
// header, a main part, and its functions once in the batch script.
func TestScripts(t *testing.T) {
	set, err := buildScripts()
	if err != nil {
		t.Fatal(err)
	}
	for _, alg := range floodgate.Algorithms {
		src, err := scriptFiles.ReadFile("scripts/" + string(alg) + ".lua")
		if err != nil {
			t.Fatal(err)
		}
		text := string(src)
		for _, want := range []string{"-- KEYS[1]", "-- ARGV", "-- Reply", "-- Mirrors  algorithm.", "local function " + string(alg) + "_step(", mainMarker} {
			if !strings.Contains(text, want) {
				t.Errorf("scripts/%s.lua lacks %q", alg, want)
			}
		}
		sc := set.single[alg]
		if sc == nil || len(sc.sha) != 40 || !strings.HasSuffix(sc.src, "return single('"+string(alg)+"', "+string(alg)+"_apply, KEYS, ARGV)\n\n") {
			t.Errorf("%s: the single script does not end with its main part", alg)
		}
		for _, sc := range []*script{set.batch, set.multi} {
			if n := strings.Count(sc.src, "local function "+string(alg)+"_step("); n != 1 {
				t.Errorf("the %s script defines %s_step %d times", sc.name, alg, n)
			}
		}
		if n := strings.Count(set.lib.src, "local function "+string(alg)+"_step("); n != 1 {
			t.Errorf("the library defines %s_step %d times", alg, n)
		}
	}
	// A run of one algorithm: only its code, and the library's multi.
	for _, alg := range floodgate.Algorithms {
		sc := set.multiOf[alg]
		if sc == nil || sc.fn != set.multi.fn || !strings.HasSuffix(sc.src, set.multi.src[strings.LastIndex(set.multi.src, mainMarker):]) {
			t.Fatalf("multi_%s: not the multi script's main part and function", alg)
		}
		for _, other := range floodgate.Algorithms {
			want := 0
			if other == alg {
				want = 1
			}
			if n := strings.Count(sc.src, "local function "+string(other)+"_step("); n != want {
				t.Errorf("multi_%s defines %s_step %d times, want %d", alg, other, n, want)
			}
			if n := strings.Count(sc.src, "\n  "+string(other)+" = "); n != want {
				t.Errorf("multi_%s has %d entries for %s in its tables, want %d", alg, n, other, want)
			}
		}
	}
	for _, sc := range []*script{set.batch, set.multi} {
		if strings.Contains(sc.src, "return single(") {
			t.Errorf("the %s script holds an algorithm's main part", sc.name)
		}
	}
	if strings.Contains(set.multi.src, "local function snapshot(") || !strings.Contains(set.batch.src, "local function snapshot(") {
		t.Error("the batch's helpers are not in the batch script alone")
	}
	// The library: one function per script, named after the library.
	if !strings.HasPrefix(set.lib.src, "#!lua name="+set.lib.name+"\n") || len(set.lib.name) != len("floodgate_")+12 {
		t.Errorf("the library starts %q", set.lib.src[:min(40, len(set.lib.src))])
	}
	all := []*script{set.batch, set.multi, set.refund, set.reserve, set.settle, set.sweep, set.raise, set.fair, set.fast, set.fastMulti, set.gcraMulti, set.slidingFast, set.slidingMulti}
	for _, sc := range set.single {
		all = append(all, sc)
	}
	for _, sc := range set.budget {
		all = append(all, sc)
	}
	for _, sc := range all {
		if sc.fn != set.lib.name+"_"+sc.name || strings.Count(set.lib.src, "function_name = '"+sc.fn+"'") != 1 {
			t.Errorf("%s: function %q is not registered once in the library", sc.name, sc.fn)
		}
	}
	if n := strings.Count(set.lib.src, "redis.register_function"); n != len(all) {
		t.Errorf("the library registers %d functions, want %d", n, len(all))
	}
}

var (
	libOut  = flag.String("lib", "", "TestDumpLibrary writes the function library (Options.Functions) to this file, for bench/lua-loop.sh")
	dumpDir = flag.String("scripts", "", "TestDumpLibrary writes every script, as EVALSHA sends it, to <name>.lua in this directory, for bench/lua-loop.sh")
)

// TestDumpLibrary writes the function library to the file -lib names, and
// every script to the directory -scripts names.
func TestDumpLibrary(t *testing.T) {
	if *libOut == "" && *dumpDir == "" {
		t.Skip("no -lib file or -scripts directory")
	}
	if *libOut != "" {
		if err := os.WriteFile(*libOut, []byte(scripts.lib.src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if *dumpDir == "" {
		return
	}
	all := []*script{scripts.batch, scripts.multi, scripts.refund, scripts.reserve, scripts.settle, scripts.sweep, scripts.raise, scripts.fair, scripts.fast, scripts.fastMulti, scripts.gcraMulti, scripts.slidingFast, scripts.slidingMulti}
	for _, m := range []map[floodgate.Algorithm]*script{scripts.single, scripts.budget, scripts.multiOf} {
		for _, sc := range m {
			all = append(all, sc)
		}
	}
	for _, sc := range all {
		if err := os.WriteFile(filepath.Join(*dumpDir, sc.name+".lua"), []byte(sc.src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
