#!/bin/sh
# As 2026-12-02-s6-sliding-loop.sh, with Options.Functions: the library's
# functions (LUA_LOOP_FUNCTION, helpers made once): old = main's library,
# function multi (what a coalesced sliding-window run goes out as on main);
# new = this branch's library, function sliding_window_multi. Libraries
# dumped with: go test -run TestDumpLibrary ./store/redisstore/ -lib FILE
D=/tmp/slid6
L=/work/wt/sliding/bench/lua-loop.sh
P=6493
for round in 1 2 3 4 5 6; do
  echo "round $round $(uptime | sed 's/.*load/load/')"
  order="old new"
  [ $((round % 2)) = 0 ] && order="new old"
  for keys in 16 1000000; do
    for v in $order; do
      if [ $v = old ]; then
        set -- 1 sliding_window -1 50000000 60000000 0 0
        for j in $(seq 16); do set -- "$@" 1 1 ''; done
        printf 'old ' ; LUA_LOOP_FUNCTION=multi LUA_LOOP_RUN=16 $L $P $D/old-lib.lua $keys 3000 "$@"
      else
        set -- 1 -1 50000000 60000000 0 16
        for j in $(seq 16); do set -- "$@" 1; done
        printf 'new ' ; LUA_LOOP_FUNCTION=sliding_window_multi LUA_LOOP_RUN=16 $L $P $D/new-lib.lua $keys 3000 "$@"
      fi
    done
  done
done
