#!/bin/sh
# cnt-ab.sh PORT ROUNDS: interleaved redis-benchmark rounds of the minimal
# script, main's fixed_window script and fixed_window_fast.lua, EVALSHA,
# 100k keys, 64 clients, -P 1 and -P 16; prints calls/s and Redis CPU per call.
port=$1; rounds=${2:-3}; n=${3:-200000}
cli="redis-cli -h 127.0.0.1 -p $port"
cpu() { $cli INFO cpu | tr -d '\r' | awk -F: '/^used_cpu_(user|sys):/ { s += $2 } END { printf "%.6f", s }'; }
for f in minimal fw-before fw-fast; do eval "sha_$(echo $f | tr - _)=\$($cli -x SCRIPT LOAD < /tmp/$f.lua)"; done
for r in $(seq $rounds); do
 for P in 1 16; do
  for f in minimal fw-before fw-fast; do
   v=$(echo $f | tr - _); eval "sha=\$sha_$v"
   $cli FLUSHALL >/dev/null; $cli CONFIG RESETSTAT >/dev/null
   b=$(cpu)
   if [ $f = minimal ]; then
     rps=$(redis-benchmark -h 127.0.0.1 -p $port -c 64 -n $n -r 100000 -P $P -q evalsha $sha 1 'k:{__rand_int__}' 60000 | tr '\r' '\n' | grep -o '[0-9.]* requests per second' | tail -1)
   else
     rps=$(redis-benchmark -h 127.0.0.1 -p $port -c 64 -n $n -r 100000 -P $P -q evalsha $sha 1 'k:{__rand_int__}' -1 1000000 60000000 1 0 0 '' | tr '\r' '\n' | grep -o '[0-9.]* requests per second' | tail -1)
   fi
   a=$(cpu)
   usec=$($cli INFO commandstats | tr -d '\r' | sed -n 's/^cmdstat_evalsha:.*usec_per_call=\([0-9.]*\),.*/\1/p')
   calls=$($cli INFO commandstats | tr -d '\r' | sed -n 's/^cmdstat_evalsha:calls=\([0-9]*\),.*/\1/p')
   echo "round $r P$P $f: $rps; redis-cpu-µs/call $(awk -v a=$a -v b=$b -v n=$calls 'BEGIN{printf "%.2f",(a-b)*1e6/n}'); usec_per_call $usec; load $(cut -d' ' -f1 /proc/loadavg)"
  done
 done
done
