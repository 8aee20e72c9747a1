#!/bin/sh
# The same rounds (5) against sliding_window_multi.lua at ad597f1 (a key repeated in a set read once), copied to /tmp/slid6/new2-swm.lua; a -race run went on alongside.
# Interleaved lua-loop.sh runs (bench/lua-loop.sh, LUA_LOOP_RUN=16) of a
# coalesced run of 16 sliding-window requests of one parameter set:
#   old      main's multi_sliding_window.lua (layout 1, what main sends)
#   newgen   this branch's multi_sliding_window.lua (counters; what a run
#            that sliding_window_multi.lua does not take goes out as)
#   new      this branch's sliding_window_multi.lua (what a usual run goes out as)
# over 16 hot keys (each once per run) and 1000000 keys (every key new).
# Scripts dumped with: go test -run TestDumpLibrary ./store/redisstore/ -scripts DIR
# (old from `git archive main`, new from this branch). redis-server on 6493,
# --save '' --appendonly no.
D=/tmp/slid6
L=/work/wt/sliding/bench/lua-loop.sh
P=6493
for round in 1 2 3 4 5; do
  echo "round $round $(uptime | sed 's/.*load/load/')"
  order="old new"
  [ $((round % 2)) = 0 ] && order="new old"
  for keys in 16 1000000; do
    for v in $order; do
      case $v in
      old|newgen)
        d=$D/old-sc; [ $v = newgen ] && d=$D/new-sc
        set -- 1 sliding_window -1 50000000 60000000 0 0
        for j in $(seq 16); do set -- "$@" 1 1 ''; done
        printf '%s ' $v; LUA_LOOP_RUN=16 $L $P $d/multi_sliding_window.lua $keys 3000 "$@" ;;
      new)
        set -- 1 -1 50000000 60000000 0 16
        for j in $(seq 16); do set -- "$@" 1; done
        printf '%s ' $v; LUA_LOOP_RUN=16 $L $P $D/new2-swm.lua $keys 3000 "$@" ;;
      esac
    done
  done
done
