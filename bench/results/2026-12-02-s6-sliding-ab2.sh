#!/bin/sh
# As 2026-12-02-s6-sliding-ab.sh, after commit "reads a key that comes again
# in a set once": old = main, newtree = s6-sliding at bd9d840 (before it),
# newtree2 = at ad597f1 (with it). A -race test run was going on alongside.
cd /tmp/slid6
for round in 1 2 3 4 5; do
  echo "round $round $(uptime | sed 's/.*load/load/')"
  if [ $((round % 2)) = 1 ]; then order="old newtree newtree2"; else order="newtree2 newtree old"; fi
  for cfg in "-keys 1 -callers 16" "-keys 1 -callers 16 -fcall" "-keys 100000 -callers 16 -fresh -fcall"; do
    for b in $order; do
      printf '%s ' "$b"; ./bin-$b -addr 127.0.0.1:6493 -n 20000 $cfg
    done
  done
done
