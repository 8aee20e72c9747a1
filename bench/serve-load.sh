#!/usr/bin/env bash
# serve-load.sh: measures `floodgate serve`'s Envoy gRPC ShouldRateLimit
# throughput and latency with `floodgate bench`, on the memory store and on a
# local Redis, and (if RATELIMIT_BIN names an envoyproxy/ratelimit
# service_cmd binary) envoyproxy/ratelimit on the same Redis.
# Everything listens on 127.0.0.1 only; every process it starts it stops.
#
#   cd bench && ./serve-load.sh                 # output on stdout
#   DURATION=10s CALLERS="16 64 256" ./serve-load.sh | tee results/x.txt
#   RATELIMIT_BIN=/path/to/service_cmd ./serve-load.sh
set -euo pipefail

cd "$(dirname "$0")"
BENCH=$(pwd)
DURATION=${DURATION:-10s}
CALLERS=${CALLERS:-"16 64 256"}
HOT_CALLERS=${HOT_CALLERS:-64}
KEYS=${KEYS:-100000}
RATELIMIT_BIN=${RATELIMIT_BIN:-}

. ./procs.sh serve-load

echo "# serve-load.sh $(date -u +%FT%TZ)"
echo "# $(uname -srm); nproc $(nproc); $(go version)"
echo "# $(grep -m1 'model name' /proc/cpuinfo)"
echo "# load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# client, server and Redis share these $(nproc) cores"

(cd .. && go build -o "$WORK/floodgate" ./cmd/floodgate)

# One rule for key user with a limit so high that every request passes,
# and one for user=hot at 10 per second, which the hot runs exceed.
mkdir -p "$WORK/rt/ratelimit/config"
cat >"$WORK/rt/ratelimit/config/bench.yaml" <<'YAML'
domain: bench
descriptors:
  - key: user
    rate_limit:
      unit: second
      requests_per_unit: 1000000000
  - key: user
    value: hot
    rate_limit:
      unit: second
      requests_per_unit: 10
YAML

REDIS_PORT=$(freeport)
redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save '' --appendonly no \
	--protected-mode yes --logfile "$WORK/redis.log" &
PIDS+=($!)
waitport "$REDIS_PORT"
echo "# $(redis-server --version)"

# failedopen HTTPPORT: floodgate's count of descriptors answered by
# fail_open (store error or timeout) since it started, from /metrics.
failedopen() {
	curl -s "http://127.0.0.1:$1/metrics" |
		awk '/^floodgate_decisions_total\{.*outcome="failed_open"/ {n += $NF} END {printf "%d\n", n}'
}

# run1 LABEL PORT HTTPPORT ARGS...: one `floodgate bench` run; with an HTTPPORT
# (floodgate), also how many of its answers were fail_open.
run1() {
	local label=$1 port=$2 hport=$3 before after
	shift 3
	echo "## $label $*"
	[ -n "$hport" ] && before=$(failedopen "$hport")
	"$WORK/floodgate" bench -grpc "127.0.0.1:$port" -d "$DURATION" -warmup 1s -domain bench -keys "$KEYS" -quiet "$@"
	if [ -n "$hport" ]; then
		after=$(failedopen "$hport")
		# Includes the warmup second, which floodgate bench does not count.
		echo "failed_open_during_run_and_warmup=$((after - before))"
	fi
}

# load LABEL PORT HTTPPORT: the grid against the service on PORT.
load() {
	local c
	for c in $CALLERS; do
		run1 "$1" "$2" "$3" -c "$c"
	done
	run1 "$1" "$2" "$3" -c "$HOT_CALLERS" -hot 0.1
}

# floodgate serve on the memory store, and on Redis with the default
# store deadline (10ms, fail_open past it) and with a 1 s one.
for store in memory redis redis-timeout1s; do
	http=$(freeport)
	grpc=$(freeport)
	args=(serve -http "127.0.0.1:$http" -grpc "127.0.0.1:$grpc" -config "$WORK/rt/ratelimit/config" -log-level error)
	case $store in
	redis*)
		redis-cli -p "$REDIS_PORT" flushall >/dev/null
		args+=(-redis "redis://127.0.0.1:$REDIS_PORT")
		;;
	esac
	[ "$store" = redis-timeout1s ] && args+=(-timeout 1s)
	"$WORK/floodgate" "${args[@]}" 2>"$WORK/floodgate-$store.log" &
	pid=$!
	PIDS+=("$pid")
	waitport "$grpc"
	load "floodgate-$store" "$grpc" "$http"
	kill "$pid"
	wait "$pid" || true
done

if [ -n "$RATELIMIT_BIN" ]; then
	redis-cli -p "$REDIS_PORT" flushall >/dev/null
	http=$(freeport)
	grpc=$(freeport)
	debug=$(freeport)
	HOST=127.0.0.1 PORT=$http GRPC_HOST=127.0.0.1 GRPC_PORT=$grpc \
		DEBUG_HOST=127.0.0.1 DEBUG_PORT=$debug \
		REDIS_SOCKET_TYPE=tcp REDIS_URL=127.0.0.1:$REDIS_PORT USE_STATSD=false \
		RUNTIME_ROOT=$WORK/rt RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=false \
		LOG_LEVEL=warn "$RATELIMIT_BIN" 2>"$WORK/ratelimit.log" &
	pid=$!
	PIDS+=("$pid")
	waitport "$grpc"
	sleep 1 # the runtime loads the config after the listener opens
	load "envoyproxy-ratelimit-redis" "$grpc" ""
	kill "$pid"
	wait "$pid" || true
fi
echo "# load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
