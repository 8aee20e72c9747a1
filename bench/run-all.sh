#!/bin/sh
# run-all.sh [-quick] [-ratelimit-bin PATH]: the whole benchmark table of
# BENCHMARKS.md in one run (bench/cmd/benchall): the redis-benchmark
# ceiling, floodgate's Redis store per algorithm and the peers, the
# embedded store and its peers, `floodgate serve` against
# envoyproxy/ratelimit, and the ratios. Markdown on stdout, progress on
# stderr.
#
#   bench/run-all.sh -quick                  # 1 to 2 minutes
#   bench/run-all.sh | tee bench/results/$(date +%F)-all.md    # 8 to 17 minutes
set -eu
cd "$(dirname "$0")"
exec go run ./cmd/benchall -root .. "$@"
