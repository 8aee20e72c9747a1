package redisstore

import (
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/floodgate-rl/floodgate"
)

// The Lua sources. common.lua holds the helpers; each algorithm's file
// holds its step functions, then a line "-- main", then the one-line main
// part of its single-request script; batch.lua is the main part of the
// batch script.
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
}

// scripts is built once from the embedded files: a single-request script per
// algorithm (common.lua + the algorithm's file) and the batch script
// (common.lua + every algorithm's functions + batch.lua), so that each
// algorithm's code exists once.
var scripts = mustBuildScripts()

func mustBuildScripts() scriptSet {
	s, err := buildScripts()
	if err != nil {
		// The files are compiled into the binary; TestScripts checks them.
		panic(err)
	}
	return s
}

func buildScripts() (scriptSet, error) {
	read := func(name string) (string, error) {
		b, err := scriptFiles.ReadFile("scripts/" + name)
		return string(b), err
	}
	common, err := read("common.lua")
	if err != nil {
		return scriptSet{}, err
	}
	batchMain, err := read("batch.lua")
	if err != nil {
		return scriptSet{}, err
	}
	set := scriptSet{single: make(map[floodgate.Algorithm]*script)}
	var lib strings.Builder
	lib.WriteString(common)
	for _, alg := range floodgate.Algorithms {
		src, err := read(string(alg) + ".lua")
		if err != nil {
			return scriptSet{}, err
		}
		funcs, _, ok := strings.Cut(src, mainMarker)
		if !ok {
			return scriptSet{}, fmt.Errorf("redisstore: scripts/%s.lua has no %q line", alg, strings.TrimSpace(mainMarker))
		}
		set.single[alg] = newScript(string(alg), common+"\n"+src)
		lib.WriteString("\n" + funcs)
	}
	set.batch = newScript("batch", lib.String()+"\n"+batchMain)
	return set, nil
}
