#!/bin/sh
# redis-ceiling.sh PORT [REQUESTS] [CLIENTS]
#
# The ceiling of floodgate's Redis store on one redis-server: redis-benchmark
# running EVALSHA of redisstore's fixed_window script (the exact source
# floodgate loads, built as store/redisstore/scripts.go builds it: common.lua,
# state.lua and fixed_window.lua, each followed by a newline; TestFixedWindowScript
# checks that the SHA-1 is floodgate's), one unit per call on the server's
# clock, keys spread over 100k with __rand_int__, unpipelined and with -P 16.
# It prints the calls per second and the CPU Redis spent per call.
#
# The arguments are those Floodgate's fixed_window sends (common.lua
# parse_request): now_us -1 (server clock), limit 1000000, period 60 s,
# cost 1, burst 0, flags 0, id "". The period is a minute rather than
# BenchmarkRedis's second so that the keys are still there for DBSIZE; the
# script does the same work either way.
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
trap 'rm -f "$src"' EXIT
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
echo "fixed_window script: $(wc -c <"$src") bytes, sha1 $sha"
echo "redis-server: $($cli INFO server | grep -E '^redis_version' | tr -d '\r')"

# One check call: the reply is {allowed, limit, remaining, reset_after_us,
# retry_after_us, now_us}.
echo "check: $($cli EVALSHA "$sha" 1 fw:check -1 1000000 60000000 1 0 0 '' | tr '\n' ' ')"

cpu() {
	$cli INFO cpu | tr -d '\r' | awk -F: '/^used_cpu_(user|sys):/ { s += $2 } END { printf "%.6f", s }'
}

for pipeline in 1 16; do
	$cli FLUSHALL >/dev/null
	$cli CONFIG RESETSTAT >/dev/null
	before=$(cpu)
	echo "== redis-benchmark -c $clients -n $n -r 100000 -P $pipeline evalsha (fixed_window, 100k keys)"
	# redis-benchmark stops reading options at the first command word.
	redis-benchmark -h 127.0.0.1 -p "$port" -c "$clients" -n "$n" -r 100000 -P "$pipeline" -q \
		evalsha "$sha" 1 'fw:user:__rand_int__' -1 1000000 60000000 1 0 0 '' |
		tr '\r' '\n' | grep 'requests per second'
	after=$(cpu)
	calls=$($cli INFO commandstats | tr -d '\r' | sed -n 's/^cmdstat_evalsha:calls=\([0-9]*\),.*/\1/p')
	echo "evalsha calls: $calls; DBSIZE (keys made): $($cli DBSIZE)"
	echo "redis-cpu-µs/op: $(awk -v a="$after" -v b="$before" -v n="$calls" 'BEGIN { printf "%.1f", (a - b) * 1e6 / n }')"
	$cli INFO commandstats | tr -d '\r' | grep '^cmdstat_evalsha'
done
