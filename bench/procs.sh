# procs.sh, sourced by serve-load.sh and serve-ab.sh (bash): a work
# directory and the processes a script starts, all stopped and removed when
# it exits, and the helpers to reach them on 127.0.0.1.
#
#   cd "$(dirname "$0")"; . ./procs.sh NAME    # WORK=/tmp/NAME.XXXXXX, PIDS=()
#   some-server --port "$(freeport)" & PIDS+=($!)

WORK=$(mktemp -d "/tmp/${1:?procs.sh: a name}.XXXXXX")
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$WORK"
}
trap cleanup EXIT

# freeport: a free TCP port of 127.0.0.1.
freeport() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}
# waitport PORT: up to 10 s for something to listen on 127.0.0.1:PORT.
waitport() {
	for _ in $(seq 1 100); do
		if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
		sleep 0.1
	done
	echo "nothing listens on 127.0.0.1:$1" >&2
	return 1
}
