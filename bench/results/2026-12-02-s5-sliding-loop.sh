#!/bin/sh
# Interleaved lua-loop.sh runs: old sliding_window.lua (main), new
# sliding_window.lua (layout 2, generic), new sliding_window_fast.lua.
cd /tmp/swab
L=/work/wt/sliding/bench/lua-loop.sh
for round in 1 2 3 4 5; do
  echo "round $round $(uptime | sed 's/.*load/load/')"
  for cfg in "1 20000" "5000 30000" "1000000 30000"; do
    for f in old-sw.lua new-sw.lua new-fast.lua; do
      $L 6491 /tmp/swab/$f $cfg -1 50000000 60000000 1 0 0 ''
    done
  done
done
