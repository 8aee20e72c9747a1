#!/bin/sh
# lua-loop.sh PORT FILE KEYS N [ARGV...]
#
# The Redis CPU of one run of a script's body, without the network: one
# EVAL runs the body of FILE N times, each time as a function made anew (as
# Redis runs a script on each EVALSHA, so that its helpers are made again
# per run), with KEYS[1] = b:{i mod KEYS} and the given ARGV, and the script
# prints redis-server's CPU time (INFO cpu) per run. Another process's load
# on the machine changes it far less than wall time or usec_per_call.
#
# Used for the "Script cost" section of BENCHMARKS.md, e.g. for the
# fixed_window script (built as store/redisstore/scripts.go builds it):
#   redis-server --port 6471 --bind 127.0.0.1 --save '' --appendonly no &
#   s=store/redisstore/scripts
#   for f in common.lua state.lua fixed_window.lua; do cat $s/$f; echo; done >/tmp/fw.lua
#   ./bench/lua-loop.sh 6471 /tmp/fw.lua 100000 30000 -1 1000000 1000000 1 0 0 ''
# It runs FLUSHALL on that server. Arguments must not contain a quote.
#
# With LUA_LOOP_RUN=<n>, each run has n keys, KEYS[j] = b:{(i*n+j) mod
# KEYS}, for the coalesced runs of multi.lua, and the figure is also given
# per key (per decision), e.g. for a run of 16 fixed-window requests of
# one parameter set, over keys that already hold a count:
#   go test -run TestDumpLibrary ./store/redisstore/ -scripts /tmp/sc
#   set -- 1 fixed_window -1 1000000 60000000 0 0
#   for j in $(seq 16); do set -- "$@" 1 1 ''; done
#   LUA_LOOP_RUN=16 ./bench/lua-loop.sh 6471 /tmp/sc/multi_fixed_window.lua 8000 5000 "$@"
# and the same run as the store sends it, to fixed_window_multi.lua (one
# set: now, limit, period, flags, its 16 keys; then a cost per key):
#   set -- 1 -1 1000000 60000000 0 16
#   for j in $(seq 16); do set -- "$@" 1; done
#   LUA_LOOP_RUN=16 ./bench/lua-loop.sh 6471 store/redisstore/scripts/fixed_window_multi.lua 8000 5000 "$@"
#
# With LUA_LOOP_FUNCTION=<script name> (fixed_window, batch, ...), FILE is
# the function library of redisstore.Options.Functions (scripts.lib.src)
# and each run calls that script's main part once, after the library's
# helpers were made once (as FCALL runs it), e.g.
#   go test -run TestDumpLibrary ./store/redisstore/ -lib /tmp/lib.lua
#   LUA_LOOP_FUNCTION=fixed_window ./bench/lua-loop.sh 6471 /tmp/lib.lua 100000 30000 -1 1000000 1000000 1 0 0 ''
set -eu
port=${1:?usage: lua-loop.sh PORT FILE KEYS N [ARGV...]}
f=$2
keys=$3
n=$4
shift 4
run=${LUA_LOOP_RUN:-1}
cli="redis-cli -h 127.0.0.1 -p $port"
argv=""
for a in "$@"; do argv="$argv'$a', "; done
w=$(mktemp)
trap 'rm -f "$w"' EXIT
if [ -n "${LUA_LOOP_FUNCTION:-}" ]; then
	{
		echo "local ARGV = {$argv}"
		# The library without its #!lua line and its registrations.
		sed -e '1d' -e '/^redis.register_function/,$d' "$f"
		echo "local m = init()"
		echo "for i = 1, $n do"
		echo "local KEYS = {} for j = 1, $run do KEYS[j] = 'b:{' .. ((i * $run + j) % $keys) .. '}' end"
		echo "m.$LUA_LOOP_FUNCTION(KEYS, ARGV)"
		echo "end"
		echo "return 1"
	} >"$w"
else {
	echo "local ARGV = {$argv}"
	echo "for i = 1, $n do"
	echo "local KEYS = {} for j = 1, $run do KEYS[j] = 'b:{' .. ((i * $run + j) % $keys) .. '}' end"
	echo "local function body()"
	cat "$f"
	echo
	echo "end"
	echo "body()"
	echo "end"
	echo "return 1"
} >"$w"
fi
cpu() {
	$cli INFO cpu | tr -d '\r' | awk -F: '/^used_cpu_(user|sys):/ { s += $2 } END { printf "%.6f", s }'
}
$cli FLUSHALL >/dev/null
# The script goes on stdin (SCRIPT LOAD, then EVALSHA): the library is
# longer than one command-line argument may be (128 KiB).
sha=$($cli -x SCRIPT LOAD <"$w")
before=$(cpu)
out=$($cli EVALSHA "$sha" 0 2>&1)
if [ "$out" != 1 ]; then
	echo "lua-loop.sh: the script failed: $out" >&2
	exit 1
fi
after=$(cpu)
printf '%s keys=%s runs=%s keys/run=%s redis-cpu-µs/run=%.2f redis-cpu-µs/key=%.2f\n' "$(basename "$f")" "$keys" "$n" "$run" \
	"$(awk -v a="$after" -v b="$before" -v n="$n" 'BEGIN { print (a - b) * 1e6 / n }')" \
	"$(awk -v a="$after" -v b="$before" -v n="$n" -v r="$run" 'BEGIN { print (a - b) * 1e6 / n / r }')"
