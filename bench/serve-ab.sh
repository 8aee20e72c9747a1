#!/usr/bin/env bash
# serve-ab.sh: the serve rows of benchall (`floodgate serve` and the no-op
# servers of bench/cmd/noopserver, gRPC and HTTP POST /v1/allow, 100k keys,
# 64 callers) as an interleaved A/B: a floodgate binary built before a
# change (BEFORE_BIN) and this checkout's, each on the memory store and on
# one local redis-server, every round loading the no-op server, "before"
# and "after" in turn, so that the noise of a shared machine falls on all
# three alike. Each run reports decisions/s and the service's CPU per
# decision (user+system from /proc/PID/stat, in µs), as benchall does; the
# summary gives the median of each over the rounds and its ratio to the
# no-op server's median. On the redis store each run also reports
# redis-server's CPU per decision and the scripts it ran per decision
# (EVALSHA, EVAL and FCALL calls of INFO commandstats): what the client
# side's coalescing leaves the server to do.
#
#   cd bench && BEFORE_BIN=/tmp/floodgate-old ./serve-ab.sh
#   ROUNDS=5 DURATION=4s STORES="memory redis" PROTOS="grpc http" ./serve-ab.sh
#
# Without BEFORE_BIN only "after" and the no-op server are loaded.
# AFTER_ARGS adds flags to the "after" serve (e.g. AFTER_ARGS="-gogc 200"),
# AFTER_ENV variables to its environment (e.g. AFTER_ENV="GOGC=400").
# Everything listens on 127.0.0.1; every process it starts it stops.
set -euo pipefail

cd "$(dirname "$0")"
DURATION=${DURATION:-3s}
WARMUP=${WARMUP:-500ms}
ROUNDS=${ROUNDS:-3}
CALLERS=${CALLERS:-64}
KEYS=${KEYS:-100000}
STORES=${STORES:-"memory redis"}
PROTOS=${PROTOS:-"grpc http"}
BEFORE_BIN=${BEFORE_BIN:-}
AFTER_ARGS=${AFTER_ARGS:-}
AFTER_ENV=${AFTER_ENV:-}

. ./procs.sh serve-ab
# cpu PID: the process's user+system CPU in clock ticks (1/100 s).
cpu() {
	sed 's/.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'
}

echo "# serve-ab.sh $(date -u +%FT%TZ); $(nproc) CPUs; $(go version)"
echo "# load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# $CALLERS callers, $KEYS keys, $DURATION per run after $WARMUP of warmup, $ROUNDS rounds"
(cd .. && go build -o "$WORK/floodgate" ./cmd/floodgate)
go build -o "$WORK/noopserver" ./cmd/noopserver
FG=$WORK/floodgate

mkdir -p "$WORK/config"
cat >"$WORK/config/bench.yaml" <<'YAML'
domain: bench
descriptors:
  - key: user
    rate_limit:
      unit: second
      requests_per_unit: 1000000000
YAML

REDIS_PORT=$(freeport)
redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save '' --appendonly no \
	--protected-mode yes --logfile "$WORK/redis.log" &
REDIS_PID=$!
PIDS+=($REDIS_PID)
waitport "$REDIS_PORT"

"$WORK/noopserver" >"$WORK/noop.out" &
NOOP_PID=$!
PIDS+=($NOOP_PID)
for _ in $(seq 1 100); do grep -q noopserver "$WORK/noop.out" && break; sleep 0.1; done
read -r _ _ NOOP_GRPC _ NOOP_HTTP <"$WORK/noop.out"

# serve NAME BIN STORE ENV ARGS...: starts floodgate serve with the
# variables ENV (space-separated, may be empty); sets NAME_pid, NAME_grpc,
# NAME_http.
serve() {
	local name=$1 bin=$2 store=$3 envs=$4 http grpc
	shift 4
	http=$(freeport)
	grpc=$(freeport)
	local args=(serve -http "127.0.0.1:$http" -grpc "127.0.0.1:$grpc" -config "$WORK/config" -log-level error -timeout 1s)
	[ "$store" = redis ] && args+=(-redis "redis://127.0.0.1:$REDIS_PORT")
	# shellcheck disable=SC2086
	env $envs "$bin" "${args[@]}" "$@" >"$WORK/$name.log" 2>&1 &
	PIDS+=($!)
	printf -v "${name}_pid" %s $!
	printf -v "${name}_grpc" %s "127.0.0.1:$grpc"
	printf -v "${name}_http" %s "http://127.0.0.1:$http"
	waitport "$grpc"
	waitport "$http"
}

RESULTS=$WORK/results.tsv
# rcmds: the scripts redis-server has run.
rcmds() {
	redis-cli -p "$REDIS_PORT" info commandstats | tr -d '\r' |
		awk -F'[:=,]' '/^cmdstat_(evalsha|eval|fcall)(_ro)?:/ {n += $3} END {print n + 0}'
}
# run STORE PROTO NAME PID TARGET: one warmup and one measured run.
run() {
	local store=$1 proto=$2 name=$3 pid=$4 target=$5 c0 c1 r0 r1 k0 k1 out
	local args=(bench "-$proto" "$target" -domain bench -keys "$KEYS" -c "$CALLERS" -quiet -json)
	"$FG" "${args[@]}" -d "$WARMUP" >/dev/null
	c0=$(cpu "$pid") r0=$(cpu "$REDIS_PID") k0=$(rcmds)
	out=$("$FG" "${args[@]}" -d "$DURATION")
	c1=$(cpu "$pid") r1=$(cpu "$REDIS_PID") k1=$(rcmds)
	echo "$out" | jq -r --arg s "$store" --arg p "$proto" --arg n "$name" --argjson t $((c1 - c0)) \
		--argjson r $((r1 - r0)) --argjson k $((k1 - k0)) \
		'[$s, $p, $n, (.decisions_per_second|floor), (if .decisions > 0 then ($t * 10000 / .decisions * 100 | round / 100) else -1 end), .latency_ms.p99, .errors,
		  (if .decisions > 0 then ($r * 10000 / .decisions * 100 | round / 100) else -1 end), (if .decisions > 0 then ($k / .decisions * 1000 | round / 1000) else -1 end)] | @tsv' |
		tee -a "$RESULTS"
}

echo -e "store\tproto\tserver\tdecisions/s\tservice_cpu_us/decision\tp99_ms\terrors\tredis_cpu_us/decision\tredis_scripts/decision"
for store in $STORES; do
	names=(noop)
	if [ -n "$BEFORE_BIN" ]; then
		serve before "$BEFORE_BIN" "$store" ""
		names+=(before)
	fi
	# shellcheck disable=SC2086
	serve after "$FG" "$store" "$AFTER_ENV" $AFTER_ARGS
	names+=(after)
	for round in $(seq 1 "$ROUNDS"); do
		# The machine's load with each round: on a shared machine it says
		# which rounds to trust.
		echo "# $store round $round: load average $(cut -d' ' -f1-3 /proc/loadavg)"
		for proto in $PROTOS; do
			# Rotate the order each round.
			n=${#names[@]}
			for k in $(seq 0 $((n - 1))); do
				name=${names[$(((k + round) % n))]}
				case $name in
				noop) pid=$NOOP_PID grpc=$NOOP_GRPC http=http://$NOOP_HTTP ;;
				before) pid=$before_pid grpc=$before_grpc http=$before_http ;;
				after) pid=$after_pid grpc=$after_grpc http=$after_http ;;
				esac
				if [ "$proto" = grpc ]; then target=$grpc; else target=$http; fi
				run "$store" "$proto" "$name" "$pid" "$target"
			done
		done
	done
	for name in before after; do
		[ "$name" = before ] && [ -z "$BEFORE_BIN" ] && continue
		pid_var=${name}_pid
		# Peak resident memory: what a higher GOGC costs.
		echo "# $store $name: peak RSS $(awk '/VmHWM/ {print $2, $3}' "/proc/${!pid_var}/status")"
		kill "${!pid_var}"
		wait "${!pid_var}" 2>/dev/null || true
	done
	[ "$store" = redis ] && redis-cli -p "$REDIS_PORT" flushall >/dev/null
done

echo
echo "## medians over $ROUNDS rounds (ratio: to the no-op server of the same protocol, in the same store's rounds)"
echo
python3 - "$RESULTS" <<'PY'
import sys, statistics as st
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
groups = {}
for s, p, n, dps, us, p99, errs, rus, rk in rows:
    groups.setdefault((s, p, n), []).append((float(dps), float(us), float(p99), float(rus), float(rk)))
print("| store | protocol | server | decisions/s | ratio | service CPU µs/decision | ratio | p99 ms | redis CPU µs/decision | redis scripts/decision |")
print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
for (s, p, n), v in groups.items():
    dps, us, p99, rus, rk = (st.median(x[i] for x in v) for i in range(5))
    noop = groups.get((s, p, "noop"))
    ndps = st.median(x[0] for x in noop); nus = st.median(x[1] for x in noop)
    redis = f"{rus:.2f} | {rk:.3f}" if s == "redis" and n != "noop" else "| "
    print(f"| {s} | {p} | {n} | {dps:.0f} | {dps/ndps:.2f} | {us:.2f} | {us/nus:.2f} | {p99:.2f} | {redis} |")
PY
echo "# load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
