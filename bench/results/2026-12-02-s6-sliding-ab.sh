#!/bin/sh
# Store-level interleaved A/B of coalesced sliding-window decisions (16
# callers): old = main (c5d6425), new = s6-sliding, each built with
# bench/results/2026-12-02-s5-sliding-ab.go.txt as cmd/swabtmp in a
# `git archive` of its tree; redis-server on 6493.
cd /tmp/slid6
for round in 1 2 3 4 5; do
  echo "round $round $(uptime | sed 's/.*load/load/')"
  if [ $((round % 2)) = 1 ]; then order="old newtree"; else order="newtree old"; fi
  for cfg in "-keys 1 -callers 16" "-keys 1 -callers 16 -fcall" "-keys 100000 -callers 16 -fresh" "-keys 100000 -callers 16 -fresh -fcall"; do
    for b in $order; do
      printf '%s ' "$b"; ./bin-$b -addr 127.0.0.1:6493 -n 20000 $cfg
    done
  done
done
