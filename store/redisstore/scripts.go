package redisstore

import (
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"github.com/floodgate-rl/floodgate"
)

// The Lua sources. common.lua holds the helpers of every script, state.lua
// the string state of the O(1) algorithms, rate.lua the rate arithmetic of
// token_bucket and gcra, zset.lua the sorted-set helpers of
// sliding_window_log and concurrency. A single-request script holds only
// the files its algorithm uses: Redis runs the whole script on every call,
// so each helper defined costs CPU per decision. Each algorithm's file holds
// its functions, then a line "-- main", then the one-line main part of its
// single-request script; batch.lua holds the batch's helpers, then "-- main"
// and the main part of the batch script. A main part reads only the names
// KEYS and ARGV of the script's globals, so that the library form (see
// library) can make it the body of a function(KEYS, ARGV).
//
//go:embed scripts/*.lua
var scriptFiles embed.FS

// mainMarker separates an algorithm file's functions from its main part.
const mainMarker = "\n-- main\n"

// script is a Lua script and its SHA-1 digest, which EVALSHA names it by,
// and the name of the same code as a function of the library, which FCALL
// names it by.
type script struct {
	name string
	src  string
	sha  string
	fn   string
}

func newScript(name, src string) *script {
	sum := sha1.Sum([]byte(src))
	return &script{name: name, src: src, sha: hex.EncodeToString(sum[:])}
}

// scriptSet is every script the store runs.
type scriptSet struct {
	single map[floodgate.Algorithm]*script
	batch  *script
	// multi decides independent requests in one run (multi.lua), for
	// coalescing concurrent calls; multiOf[alg] is the same script with
	// only alg's code, for a run whose requests are all of alg (see
	// multiOnly).
	multi   *script
	multiOf map[floodgate.Algorithm]*script
	// budget claims units of a local budget and gives them back
	// (budget.lua), for the algorithms that take a
	// floodgate.Limit.LocalBudget.
	budget map[floodgate.Algorithm]*script
	// refund gives back what a slot of a batch took when another slot
	// denied it (refund.lua).
	refund *script
	// raise raises a fixed window's count to a ledger's (raise.lua).
	raise *script
	// reserve holds units for a reservation (reserve.lua), settle
	// settles its holds (settle.lua), and sweep keeps the index of the
	// holds to expire (sweep.lua).
	reserve, settle, sweep *script
	// fair decides a request of a flow under a limit shared by flows
	// (fair.lua).
	fair *script
	// fast decides the usual single request of an aligned fixed window
	// (fixed_window_fast.lua), a script much smaller than
	// single[FixedWindow].
	fast *script
	// slidingFast decides the usual single request of a sliding window
	// (sliding_window_fast.lua), as fast does for a fixed window.
	slidingFast *script
	// fastMulti decides a coalesced run of usual aligned fixed-window
	// requests (fixed_window_multi.lua), each as fast would, in place of
	// multiOf[FixedWindow] (or, with functions, multi).
	fastMulti *script
	// slidingMulti decides a coalesced run of usual sliding-window
	// requests (sliding_window_multi.lua), each as slidingFast would, in
	// place of multiOf[SlidingWindow] (or, with functions, multi).
	slidingMulti *script
	// gcraMulti decides the usual GCRA requests of a coalesced run, or
	// one alone (gcra_multi.lua), each as single[GCRA] would, in place
	// of multiOf[GCRA] (or, with functions, multi).
	gcraMulti *script
	// lib is every script above as one Redis function library.
	lib library
}

// library is the Redis 7 function library of Options.Functions: every
// script of a scriptSet as one function, so that FUNCTION LOAD runs the
// helpers' definitions once and each FCALL runs only the function.
//
// Its form: Redis loads a library in an environment that holds only
// redis.register_function and redis.log (reading math or redis.call at
// load is an error), so the library defines one local function, init,
// whose body is the helpers and the algorithms' functions in the order of
// the batch script, then budget.lua, then a table of every main part as a
// function(KEYS, ARGV). Each registered function's callback runs init on
// its first call (on that server, per load) and keeps the table in an
// upvalue: the helpers are built once per load, not once per call. The
// library has no effect at load beyond registering its functions.
//
// name is floodgate_ and the first 12 hex digits of the SHA-1 of the
// library's code without its names, and every function is named
// <name>_<script name>: another version of the scripts is another library
// with other functions, so versions of Floodgate sharing a Redis (a
// rolling deploy) do not replace each other's.
type library struct {
	name string
	src  string
}

// budgeted lists the algorithms that take a local budget, each with its
// state's fields variable and the field that counts the units of the
// current window, which a return takes units off.
// io, if not empty, is the functions that read and store the state in
// place of load_state and save_state (a fixed window's counter, a sliding
// window's counters).
var budgeted = []struct {
	alg                 floodgate.Algorithm
	fields, counted, io string
}{
	{floodgate.FixedWindow, "FIXED_WINDOW_FIELDS", "count", ", fixed_window_load, fixed_window_save"},
	{floodgate.SlidingWindow, "SLIDING_WINDOW_FIELDS", "curr", ", sliding_window_load, sliding_window_save"},
}

// scripts is built once from the embedded files: a single-request script per
// algorithm (common.lua, the helpers it needs, the algorithm's file) and
// the batch and multi scripts (every helper, every algorithm's functions,
// batch.lua or multi.lua), so that each algorithm's code exists once.
var scripts = mustBuildScripts()

func mustBuildScripts() scriptSet {
	s, err := buildScripts()
	if err != nil {
		// The files are compiled into the binary; TestScripts checks them.
		panic(err)
	}
	return s
}

// helpers lists the helper files an algorithm's script includes after
// common.lua.
func helpers(alg floodgate.Algorithm) []string {
	switch alg {
	case floodgate.FixedWindow, floodgate.SlidingWindow:
		return []string{"state.lua"}
	case floodgate.TokenBucket, floodgate.GCRA:
		return []string{"state.lua", "rate.lua"}
	case floodgate.SlidingWindowLog, floodgate.Concurrency:
		return []string{"zset.lua"}
	}
	return nil
}

func buildScripts() (scriptSet, error) {
	files := make(map[string]string)
	read := func(name string) (string, error) {
		if src, ok := files[name]; ok {
			return src, nil
		}
		b, err := scriptFiles.ReadFile("scripts/" + name)
		if err != nil {
			return "", err
		}
		files[name] = string(b)
		return string(b), nil
	}
	// split cuts a file into its functions and its main part.
	split := func(name string) (funcs, main string, err error) {
		text, err := read(name)
		if err != nil {
			return "", "", err
		}
		f, m, ok := strings.Cut(text, mainMarker)
		if !ok {
			return "", "", fmt.Errorf("redisstore: scripts/%s has no %q line", name, strings.TrimSpace(mainMarker))
		}
		return f, m, nil
	}
	set := scriptSet{single: make(map[floodgate.Algorithm]*script), budget: make(map[floodgate.Algorithm]*script),
		multiOf: make(map[floodgate.Algorithm]*script)}
	var mains []mainPart
	var funcs []string
	for _, alg := range floodgate.Algorithms {
		parts := append(append([]string{"common.lua"}, helpers(alg)...), string(alg)+".lua")
		var src strings.Builder
		for _, name := range parts {
			text, err := read(name)
			if err != nil {
				return scriptSet{}, err
			}
			src.WriteString(text + "\n")
		}
		set.single[alg] = newScript(string(alg), src.String())
		f, m, err := split(string(alg) + ".lua")
		if err != nil {
			return scriptSet{}, err
		}
		funcs = append(funcs, f)
		mains = append(mains, mainPart{string(alg), m})
	}
	// shared is what the batch and multi scripts start with: every helper
	// file and every algorithm's functions. The library then adds the
	// helpers of both.
	var shared strings.Builder
	for _, name := range []string{"common.lua", "state.lua", "rate.lua", "zset.lua"} {
		text, err := read(name)
		if err != nil {
			return scriptSet{}, err
		}
		shared.WriteString(text + "\n")
	}
	for _, f := range funcs {
		shared.WriteString(f + "\n")
	}
	batchFuncs, batchMain, err := split("batch.lua")
	if err != nil {
		return scriptSet{}, err
	}
	multiFuncs, multiMain, err := split("multi.lua")
	if err != nil {
		return scriptSet{}, err
	}
	refundFuncs, refundMain, err := split("refund.lua")
	if err != nil {
		return scriptSet{}, err
	}
	reserveFuncs, reserveMain, err := split("reserve.lua")
	if err != nil {
		return scriptSet{}, err
	}
	settleFuncs, settleMain, err := split("settle.lua")
	if err != nil {
		return scriptSet{}, err
	}
	sweepFuncs, sweepMain, err := split("sweep.lua")
	if err != nil {
		return scriptSet{}, err
	}
	raiseFuncs, raiseMain, err := split("raise.lua")
	if err != nil {
		return scriptSet{}, err
	}
	fairFuncs, fairMain, err := split("fair.lua")
	if err != nil {
		return scriptSet{}, err
	}
	// The scripts that stand alone, each also a function of the library.
	var standalone []mainPart
	for _, sc := range []struct {
		to   **script
		name string
	}{
		{&set.fast, "fixed_window_fast"}, {&set.fastMulti, "fixed_window_multi"}, {&set.gcraMulti, "gcra_multi"},
		{&set.slidingFast, "sliding_window_fast"}, {&set.slidingMulti, "sliding_window_multi"},
	} {
		src, err := read(sc.name + ".lua")
		if err != nil {
			return scriptSet{}, err
		}
		*sc.to = newScript(sc.name, src)
		standalone = append(standalone, mainPart{sc.name, src})
	}
	set.batch = newScript("batch", shared.String()+batchFuncs+mainMarker+batchMain)
	set.multi = newScript("multi", shared.String()+multiFuncs+mainMarker+multiMain)
	for i, alg := range floodgate.Algorithms {
		var src strings.Builder
		for _, name := range append([]string{"common.lua"}, helpers(alg)...) {
			src.WriteString(files[name] + "\n")
		}
		only, err := multiOnly(multiFuncs, alg)
		if err != nil {
			return scriptSet{}, err
		}
		src.WriteString(funcs[i] + "\n" + only + mainMarker + multiMain)
		set.multiOf[alg] = newScript("multi_"+string(alg), src.String())
	}
	// The scripts of refunds and reservations add to shared the batch's
	// helpers, which they use, the refunds, and the holds' helpers.
	set.refund = newScript("refund", shared.String()+batchFuncs+"\n"+refundFuncs+mainMarker+refundMain)
	holds := shared.String() + batchFuncs + "\n" + refundFuncs + "\n" + reserveFuncs
	set.reserve = newScript("reserve", holds+mainMarker+reserveMain)
	set.settle = newScript("settle", holds+"\n"+settleFuncs+mainMarker+settleMain)
	set.sweep = newScript("sweep", files["common.lua"]+"\n"+sweepFuncs+mainMarker+sweepMain)
	set.raise = newScript("raise", shared.String()+batchFuncs+"\n"+refundFuncs+"\n"+raiseFuncs+mainMarker+raiseMain)
	set.fair = newScript("fair", files["common.lua"]+"\n"+fairFuncs+mainMarker+fairMain)
	mains = append(mains, mainPart{"batch", batchMain}, mainPart{"multi", multiMain}, mainPart{"refund", refundMain},
		mainPart{"reserve", reserveMain}, mainPart{"settle", settleMain}, mainPart{"sweep", sweepMain}, mainPart{"raise", raiseMain},
		mainPart{"fair", fairMain})
	mains = append(mains, standalone...)
	for _, f := range []string{batchFuncs, multiFuncs, refundFuncs, reserveFuncs, settleFuncs, sweepFuncs, raiseFuncs, fairFuncs} {
		shared.WriteString(f + "\n")
	}
	budgetSrc, err := read("budget.lua")
	if err != nil {
		return scriptSet{}, err
	}
	for _, bf := range budgeted {
		name := "budget_" + string(bf.alg)
		main := fmt.Sprintf("return budget_main('%s', %s_step, %s, %s_expires, '%s', KEYS, ARGV%s)\n", bf.alg, bf.alg, bf.fields, bf.alg, bf.counted, bf.io)
		src := files["common.lua"] + "\n" + files["state.lua"] + "\n" + funcs[slices.Index(floodgate.Algorithms, bf.alg)] + "\n" + budgetSrc + "\n" + main
		set.budget[bf.alg] = newScript(name, src)
		mains = append(mains, mainPart{name, main})
	}
	set.lib = buildLibrary(shared.String()+"\n"+budgetSrc+"\n", mains)
	for _, sc := range set.single {
		sc.fn = set.lib.name + "_" + sc.name
	}
	for _, sc := range set.budget {
		sc.fn = set.lib.name + "_" + sc.name
	}
	for _, sc := range []*script{set.batch, set.multi, set.refund, set.reserve, set.settle, set.sweep, set.raise, set.fair, set.fast, set.fastMulti, set.gcraMulti, set.slidingFast, set.slidingMulti} {
		sc.fn = set.lib.name + "_" + sc.name
	}
	// With functions, the library's multi serves every run: its helpers
	// are made once per load, so leaving out other algorithms saves nothing.
	for _, sc := range set.multiOf {
		sc.fn = set.multi.fn
	}
	return set, nil
}

// multiOnly is the functions part of multi.lua for runs of alg alone: its
// tables of algorithms (MULTI_APPLY and MULTI_STATE, one entry per line)
// keep only alg's entry, so that the script needs only alg's functions.
// Redis runs a script's whole body at each call, so the helpers and the
// entries of every other algorithm, which such a run never uses, would be
// made for nothing at every run.
func multiOnly(funcs string, alg floodgate.Algorithm) (string, error) {
	var out strings.Builder
	inTable, kept := false, 0
	for line := range strings.Lines(funcs) {
		switch {
		case line == "local MULTI_APPLY = {\n" || line == "local MULTI_STATE = {\n":
			inTable = true
		case inTable && line == "}\n":
			inTable = false
		case inTable:
			name, _, ok := strings.Cut(strings.TrimSpace(line), " = ")
			if !ok || !slices.Contains(floodgate.Algorithms, floodgate.Algorithm(name)) {
				return "", fmt.Errorf("redisstore: scripts/multi.lua: unexpected line in a table of algorithms: %q", line)
			}
			if floodgate.Algorithm(name) != alg {
				continue
			}
			kept++
		}
		out.WriteString(line)
	}
	if kept != 1 {
		return "", fmt.Errorf("redisstore: scripts/multi.lua: %d entries for %s in its tables of algorithms, want 1", kept, alg)
	}
	return out.String(), nil
}

// mainPart is the main part of a script, by the script's name: the body of
// its function in the library.
type mainPart struct{ name, src string }

// buildLibrary builds the library (see library) whose init defines helpers
// and returns mains as functions, and registers one Redis function per
// main part.
func buildLibrary(helpers string, mains []mainPart) library {
	var body strings.Builder
	body.WriteString("local main\n\n-- init defines every helper and returns the main parts, by script name.\nlocal function init()\n")
	body.WriteString(helpers)
	body.WriteString("return {\n")
	for _, m := range mains {
		fmt.Fprintf(&body, "%s = function(KEYS, ARGV)\n%s\nend,\n", m.name, m.src)
	}
	body.WriteString("}\nend\n")
	sum := sha1.Sum([]byte(body.String()))
	name := "floodgate_" + hex.EncodeToString(sum[:])[:12]
	var lib strings.Builder
	fmt.Fprintf(&lib, "#!lua name=%s\n-- Floodgate's scripts as functions: see library in store/redisstore/scripts.go.\n", name)
	lib.WriteString(body.String())
	for _, m := range mains {
		fn := name + "_" + m.name
		fmt.Fprintf(&lib, "\nredis.register_function{function_name = '%s', callback = function(keys, args)\n  main = main or init()\n  return main.%s(keys, args)\nend}\n", fn, m.name)
	}
	return library{name: name, src: lib.String()}
}
