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
// single-request script; batch.lua is the main part of the batch script.
//
//go:embed scripts/*.lua
var scriptFiles embed.FS

// mainMarker separates an algorithm file's functions from its main part.
const mainMarker = "\n-- main\n"

// argsPerRequest is ARGS_PER_REQUEST in common.lua: the ARGV strings of one
// request.
const argsPerRequest = 7

// Flags of a request, as common.lua reads them.
const (
	flagFirstHit      = 1
	flagCountRejected = 2
	flagRelease       = 4
)

// script is a Lua script and its SHA-1 digest, which EVALSHA names it by.
type script struct {
	name string
	src  string
	sha  string
}

func newScript(name, src string) *script {
	sum := sha1.Sum([]byte(src))
	return &script{name: name, src: src, sha: hex.EncodeToString(sum[:])}
}

// scriptSet is every script the store runs.
type scriptSet struct {
	single map[floodgate.Algorithm]*script
	batch  *script
	// lease claims and returns leased budget (lease.lua), for the
	// algorithms that take a floodgate.Limit.LocalBudget.
	lease map[floodgate.Algorithm]*script
}

// leased lists the algorithms that lease budget, each with its state's
// fields variable and the field that counts the units of the current
// window, which a return takes units off.
var leased = []struct {
	alg             floodgate.Algorithm
	fields, counted string
}{
	{floodgate.FixedWindow, "FIXED_WINDOW_FIELDS", "count"},
	{floodgate.SlidingWindow, "SLIDING_WINDOW_FIELDS", "curr"},
}

// scripts is built once from the embedded files: a single-request script per
// algorithm (common.lua, the helpers it needs, the algorithm's file) and
// the batch script (every helper, every algorithm's functions, batch.lua),
// so that each algorithm's code exists once.
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
		files[name] = string(b)
		return string(b), err
	}
	set := scriptSet{single: make(map[floodgate.Algorithm]*script)}
	batch := []string{"common.lua", "state.lua", "rate.lua", "zset.lua"}
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
		text, _ := read(string(alg) + ".lua")
		f, _, ok := strings.Cut(text, mainMarker)
		if !ok {
			return scriptSet{}, fmt.Errorf("redisstore: scripts/%s.lua has no %q line", alg, strings.TrimSpace(mainMarker))
		}
		funcs = append(funcs, f)
	}
	var src strings.Builder
	for _, name := range batch {
		text, err := read(name)
		if err != nil {
			return scriptSet{}, err
		}
		src.WriteString(text + "\n")
	}
	for _, f := range funcs {
		src.WriteString(f + "\n")
	}
	text, err := read("batch.lua")
	if err != nil {
		return scriptSet{}, err
	}
	src.WriteString(text)
	set.batch = newScript("batch", src.String())
	set.lease = make(map[floodgate.Algorithm]*script)
	leaseSrc, err := read("lease.lua")
	if err != nil {
		return scriptSet{}, err
	}
	for _, lf := range leased {
		src.Reset()
		for _, name := range append([]string{"common.lua"}, helpers(lf.alg)...) {
			src.WriteString(files[name] + "\n")
		}
		src.WriteString(funcs[slices.Index(floodgate.Algorithms, lf.alg)] + "\n")
		src.WriteString(leaseSrc + "\n")
		fmt.Fprintf(&src, "return lease_main('%s', %s_step, %s, %s_expires, '%s')\n", lf.alg, lf.alg, lf.fields, lf.alg, lf.counted)
		set.lease[lf.alg] = newScript("lease_"+string(lf.alg), src.String())
	}
	return set, nil
}
