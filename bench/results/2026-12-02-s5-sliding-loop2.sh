#!/bin/sh
# Interleaved lua-loop.sh runs of the FCALL library's sliding_window and of
# multi_sliding_window.lua (a coalesced run of 16), old (main) vs new.
cd /tmp/swab
L=/work/wt/sliding/bench/lua-loop.sh
set -- 1 sliding_window -1 50000000 60000000 0 0
for j in $(seq 16); do set -- "$@" 1 1 ''; done
for round in 1 2 3 4 5; do
  echo "round $round $(uptime | sed 's/.*load/load/')"
  for v in old new; do
    printf 'fcall %s ' $v; LUA_LOOP_FUNCTION=sliding_window $L 6491 /tmp/swab/$v-lib.lua 1 20000 -1 50000000 60000000 1 0 0 ''
    printf 'fcall %s ' $v; LUA_LOOP_FUNCTION=sliding_window $L 6491 /tmp/swab/$v-lib.lua 1000000 30000 -1 50000000 60000000 1 0 0 ''
    printf 'multi16 %s ' $v; LUA_LOOP_RUN=16 $L 6491 /tmp/swab/$v-sc/multi_sliding_window.lua 16 3000 "$@"
    printf 'multi16 %s ' $v; LUA_LOOP_RUN=16 $L 6491 /tmp/swab/$v-sc/multi_sliding_window.lua 1000000 3000 "$@"
  done
done
