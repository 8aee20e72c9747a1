#!/bin/sh
# redis-ceiling.sh PORT [REQUESTS] [CLIENTS]
#
# The ceilings of floodgate's Redis store on one redis-server, measured by
# redis-benchmark, keys spread over 100k with __rand_int__, unpipelined and
# with -P 16, one unit per call:
#
#   - minimal: the cheapest script a counter can be, INCR of the key and
#     PEXPIRE when the INCR made it (so the key ends), returning the count:
#     the physical reference for a decision in a script, what Redis can do
#     per call with nothing checked and nothing but a number answered;
#   - fixed_window: EVALSHA of redisstore's fixed_window script (the exact
#     source floodgate loads, built as store/redisstore/scripts.go builds
#     it: common.lua, state.lua and fixed_window.lua, each followed by a
#     newline; TestFixedWindowScript checks that the SHA-1 is floodgate's)
#     on the server's clock;
#   - fixed_window_fast: EVALSHA of fixed_window_fast.lua alone, the small
#     script the store sends first for a single aligned request (without
#     Options.Functions): the default path of one decision.
#
# With REDIS_CEILING_MULTI=<n> (2 to 128), it also measures
#   - fixed_window_multi: EVALSHA of fixed_window_multi.lua, the script a
#     coalesced run of aligned fixed-window requests goes out as, n keys
#     (each its own __rand_int__) of one parameter set per call, as the
#     store sends a run of n concurrent calls; its CPU is also given per
#     decision (redis-cpu-µs/decision), to set beside the minimal script's
#     per call. (benchall does not set it: it reads the six figures above.)
#
# For each it prints the calls per second, the keys made (DBSIZE: the
# spread is real) and the CPU Redis spent per call (INFO cpu over INFO
# commandstats), in lines that benchall reads:
#
#   == minimal P1
#   ... requests per second ...
#   redis-cpu-µs/op: 2.4
#
# The arguments are those Floodgate's fixed_window sends (common.lua
# parse_request): now_us -1 (server clock), limit 1000000, period 60 s,
# cost 1, burst 0, flags 0, id "". The period is a minute rather than
# BenchmarkRedis's second so that the keys are still there for DBSIZE; the
# scripts do the same work either way.
#
# Run against a redis-server you started, on loopback, e.g.
#   redis-server --port 6390 --bind 127.0.0.1 --save '' --appendonly no &
#   ./redis-ceiling.sh 6390
# It runs FLUSHALL on that server.
set -eu
port=${1:?usage: redis-ceiling.sh PORT [REQUESTS] [CLIENTS]}
n=${2:-200000}
clients=${3:-64}
here=$(cd "$(dirname "$0")" && pwd)
scripts=$here/../store/redisstore/scripts
cli="redis-cli -h 127.0.0.1 -p $port"

src=$(mktemp)
minsrc=$(mktemp)
fastsrc=$(mktemp)
trap 'rm -f "$src" "$minsrc" "$fastsrc"' EXIT
{
	for f in common.lua state.lua fixed_window.lua; do
		cat "$scripts/$f"
		printf '\n'
	done
} >"$src"
want=$(sha1sum "$src" | cut -d' ' -f1)
# -x sends stdin unchanged as the last argument ("$(cat …)" would drop the
# trailing newlines and change the SHA-1).
sha=$($cli -x SCRIPT LOAD <"$src")
if [ "$sha" != "$want" ]; then
	echo "SCRIPT LOAD returned $sha, want $want" >&2
	exit 1
fi
cat >"$minsrc" <<'LUA'
local n = redis.call('INCR', KEYS[1])
if n == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
end
return n
LUA
minsha=$($cli -x SCRIPT LOAD <"$minsrc")
# The file as it is: redisstore sends it unchanged (TestFixedWindowScript).
cat "$scripts/fixed_window_fast.lua" >"$fastsrc"
fastsha=$($cli -x SCRIPT LOAD <"$fastsrc")
echo "fixed_window_fast script: $(wc -c <"$fastsrc") bytes, sha1 $fastsha"
echo "fixed_window script: $(wc -c <"$src") bytes, sha1 $sha"
echo "minimal script: $(wc -c <"$minsrc") bytes, sha1 $minsha"
echo "redis-server: $($cli INFO server | grep -E '^redis_version' | tr -d '\r')"

# One check call each: fixed_window's reply is {allowed, limit, remaining,
# reset_after_us, retry_after_us, now_us}; the minimal one's the count.
echo "check fixed_window: $($cli EVALSHA "$sha" 1 fw:check -1 1000000 60000000 1 0 0 '' | tr '\n' ' ')"
echo "check minimal: $($cli EVALSHA "$minsha" 1 min:check 60000 | tr '\n' ' ')"
# {2} would be the fast script declining (the store would then run
# fixed_window.lua): a check that it decides.
fastcheck=$($cli EVALSHA "$fastsha" 1 ff:check -1 1000000 60000000 1 0 0 '' | tr '\n' ' ')
echo "check fixed_window_fast: $fastcheck"
case $fastcheck in
"2 ") echo "fixed_window_fast declined the check call" >&2; exit 1 ;;
esac

cpu() {
	$cli INFO cpu | tr -d '\r' | awk -F: '/^used_cpu_(user|sys):/ { s += $2 } END { printf "%.6f", s }'
}

# run NAME PIPELINE ARGS...: one redis-benchmark run of EVALSHA ARGS.
run() {
	name=$1
	pipeline=$2
	shift 2
	$cli FLUSHALL >/dev/null
	$cli CONFIG RESETSTAT >/dev/null
	before=$(cpu)
	echo "== $name P$pipeline: redis-benchmark -c $clients -n $n -r 100000 -P $pipeline evalsha ($name, 100k keys)"
	# redis-benchmark stops reading options at the first command word.
	redis-benchmark -h 127.0.0.1 -p "$port" -c "$clients" -n "$n" -r 100000 -P "$pipeline" -q \
		evalsha "$@" |
		tr '\r' '\n' | grep 'requests per second'
	after=$(cpu)
	calls=$($cli INFO commandstats | tr -d '\r' | sed -n 's/^cmdstat_evalsha:calls=\([0-9]*\),.*/\1/p')
	echo "evalsha calls: $calls; DBSIZE (keys made): $($cli DBSIZE)"
	echo "redis-cpu-µs/op: $(awk -v a="$after" -v b="$before" -v n="$calls" 'BEGIN { printf "%.2f", (a - b) * 1e6 / n }')"
	$cli INFO commandstats | tr -d '\r' | grep '^cmdstat_evalsha'
}

for pipeline in 1 16; do
	run minimal "$pipeline" "$minsha" 1 'min:user:__rand_int__' 60000
done
for pipeline in 1 16; do
	run fixed_window "$pipeline" "$sha" 1 'fw:user:__rand_int__' -1 1000000 60000000 1 0 0 ''
done
for pipeline in 1 16; do
	run fixed_window_fast "$pipeline" "$fastsha" 1 'ff:user:__rand_int__' -1 1000000 60000000 1 0 0 ''
done
multi=${REDIS_CEILING_MULTI:-}
if [ -n "$multi" ]; then
	multisha=$($cli -x SCRIPT LOAD <"$scripts/fixed_window_multi.lua")
	# KEYS: multi keys; ARGV: one set (now -1, limit, period, flags 0, multi
	# keys), then a cost of 1 per key.
	set -- "$multisha" "$multi"
	for _ in $(seq "$multi"); do set -- "$@" 'fm:user:__rand_int__'; done
	set -- "$@" 1 -1 1000000 60000000 0 "$multi"
	for _ in $(seq "$multi"); do set -- "$@" 1; done
	echo "check fixed_window_multi: $($cli EVALSHA "$@" | tr '\n' ' ')"
	n=$((n / multi))
	for pipeline in 1 16; do
		out=$(run fixed_window_multi "$pipeline" "$@")
		echo "$out"
		cpu=$(echo "$out" | sed -n 's/^redis-cpu-µs\/op: //p')
		echo "redis-cpu-µs/decision: $(awk -v c="$cpu" -v m="$multi" 'BEGIN { printf "%.2f", c / m }')"
	done
fi
