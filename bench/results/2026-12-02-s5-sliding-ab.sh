#!/bin/sh
# Interleaved A/B of sliding-window decisions: old (main) vs new (s5-sliding).
cd /tmp/swab
for round in 1 2 3 4 5 6; do
  echo "round $round $(uptime | sed 's/.*load/load/')"
  if [ $((round % 2)) = 1 ]; then order="old-bin new"; else order="new old-bin"; fi
  for cfg in "-keys 1" "-keys 1 -fcall" "-keys 100000" "-keys 100000 -fresh" "-keys 1 -callers 16" "-keys 100000 -callers 16 -fresh"; do
    for b in $order; do
      printf '%s ' "$b"; ./$b -n 20000 $cfg
    done
  done
done
