#!/bin/bash
# usage: [N=2000] kv-forward-copies.sh PMWIRE: three `pmwire kv --cluster` members on /dev/shm pools (RESP
# 1648x, peers 1710x), `redis-benchmark -c 4 -n N -t set -d 1024` through a follower, then each member's
# `INFO copies` (value bytes copied per stage; docs/bench.md, "Writes through a follower").
PM=$1; D=${D:-/tmp/kvfwd}; mkdir -p $D; SECRET=$D/secret
[ -s "$SECRET" ] || { head -c 32 /dev/urandom > "$SECRET"; chmod 600 "$SECRET"; }
rm -f /dev/shm/kvfwd-*
declare -A P
for id in 1 2 3; do
  $PM kv --pool /dev/shm/kvfwd-$id.pool --size 1G --resp 127.0.0.1:1648$id --http 127.0.0.1:0 \
    --cluster 1=127.0.0.1:17101,2=127.0.0.1:17102,3=127.0.0.1:17103 --id $id --peer-transport uring \
    --secret-file "$SECRET" > $D/m$id.log 2>&1 &
  P[$id]=$!
done
stop() { kill ${P[1]} ${P[2]} ${P[3]} 2>/dev/null; for id in 1 2 3; do while kill -0 ${P[$id]} 2>/dev/null; do sleep 0.1; done; done; rm -f /dev/shm/kvfwd-*; }
LID=
for i in $(seq 1 80); do
  for id in 1 2 3; do r=$(redis-cli -p 1648$id ROLE 2>/dev/null | head -1); [ "$r" = master ] && LID=$id; done
  [ -n "$LID" ] && break; sleep 0.5
done
[ -z "$LID" ] && { echo "no leader"; stop; exit 1; }
F=$(( LID % 3 + 1 )); O=$(( F % 3 + 1 ))
echo "leader m$LID, serving follower m$F, other follower m$O; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
c() { redis-cli -p 1648$1 INFO copies | tr -d "\r" | grep -E "^copy_value|^copy_writes" | tr '\n' ' '; echo; }
redis-benchmark -p 1648$F -c 4 -n ${N:-2000} -t set -d 1024 -r 100000 -q 2>&1 | tr '\r' '\n' | grep -a per | tail -1
sleep 0.5
for i in $LID $F $O; do echo "m$i: $(c $i)"; done
stop
