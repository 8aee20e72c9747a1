#!/bin/sh
# run-all.sh [-quick] [-saturation] [-ratelimit-bin PATH]: the whole
# benchmark table of BENCHMARKS.md in one run (bench/cmd/benchall): the
# redis-benchmark ceiling, floodgate's Redis store per algorithm and the
# peers, the embedded store and its peers, `floodgate serve` against
# envoyproxy/ratelimit, the ratios, and the saturation curve (serve with
# its defaults beside a busy-loop competitor of 0 to 200% of a core).
# Markdown on stdout, progress on stderr.
#
#   bench/run-all.sh -quick                  # 1 to 2 minutes, no saturation curve
#   bench/run-all.sh -saturation             # the saturation curve alone, 3 to 4 minutes
#   bench/run-all.sh -quick -saturation      # the same with shorter steps, under 2 minutes
#   bench/run-all.sh | tee bench/results/$(date +%F)-all.md    # 11 to 21 minutes
set -eu
cd "$(dirname "$0")"
exec go run ./cmd/benchall -root .. "$@"
