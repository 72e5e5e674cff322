#!/usr/bin/env bash
# SETs of DSZ (64) bytes by 64 closed-loop clients (redis-benchmark, random keys) through the leader of
# a 3-member cluster with 256 MiB pools, N (4 M) of them or until the first error; then each member: alive,
# keys, and its INFO copies (value bytes copied on receipt: 0 while a follower names values in place).
# usage: [N=...] [DSZ=...] scripts/kv-follower-copies.sh PMWIRE
set -uo pipefail
source "$(dirname "$0")/kv-cluster-lib.sh"
B=${1:?pmwire binary}; D=/dev/shm/zcf; rm -rf $D; mkdir -p $D
echo "cpu: $("$B" doctor | sed -n 's/^cpu: *//p')"
start_cluster "$B" $D 2708 2709 2710; L=$LEADER
redis-benchmark -p 2709$L -c 64 -n ${N:-4000000} -r 100000000 -t set -d ${DSZ:-64} --csv 2>&1 | tr '\r' '\n' | grep -iE "error|OOM|rps" | tail -2 | cut -c1-160
sleep 1
for i in 1 2 3; do
  echo "member $i: alive $(kill -0 ${PIDS[$((i-1))]} 2>/dev/null && echo yes || echo NO) keys $(redis-cli -p 2709$i DBSIZE) $(redis-cli -p 2709$i INFO copies | tr -d '\r' | grep -E 'received|per_write|mode' | tr '\n' ' ')"
done
kill "${PIDS[@]}"; wait "${PIDS[@]}" 2>/dev/null
for i in 1 2 3; do tail -2 $D/m$i.log 2>/dev/null; done
rm -rf $D
