#!/usr/bin/env bash
# How many 64 B values written by 64 closed-loop clients (redis-benchmark, random keys) a 256 MiB
# store holds before its first error, per round: single-node `pmwire kv` on a fresh 256 MiB pool,
# a 3-member `pmwire kv --cluster` (fresh 256 MiB pools, through the leader), and redis-server
# with `maxmemory 256mb` (noeviction, no persistence) as the peer, in the same round.
# usage: scripts/kv-capacity.sh PMWIRE ROUNDS
set -uo pipefail
source "$(dirname "$0")/kv-cluster-lib.sh"
B=${1:?pmwire binary}; R=${2:-3}; D=/dev/shm/kvcap
load() { redis-benchmark -p "$1" -c 64 -n 4000000 -r 100000000 -t set -d 64 --csv 2>&1 | tr '\r' '\n' | grep -iE "error|OOM" | tail -1 | cut -c1-120; }
wait_port() { for _ in $(seq 100); do redis-cli -p "$1" PING >/dev/null 2>&1 && return 0; sleep 0.1; done; return 1; }
echo "cpu: $("$B" doctor | sed -n 's/^cpu: *//p')"
for r in $(seq "$R"); do
  rm -rf $D; mkdir -p $D
  # single node
  setsid "$B" kv --pool $D/single --size 256M --resp 127.0.0.1:27071 --http 127.0.0.1:27072 >$D/single.log 2>&1 & sp=$!
  wait_port 27071; e=$(load 27071); single=$(redis-cli -p 27071 DBSIZE); kill $sp; wait $sp 2>/dev/null
  # redis-server, maxmemory 256mb
  redis-server --port 27073 --save '' --appendonly no --maxmemory 256mb --maxmemory-policy noeviction --daemonize no >$D/redis.log 2>&1 & rp=$!
  wait_port 27073; re=$(load 27073); redis=$(redis-cli -p 27073 DBSIZE); redis-cli -p 27073 shutdown nosave >/dev/null 2>&1; wait $rp 2>/dev/null
  # cluster
  start_cluster "$B" $D 2708 2709 2710; L=$LEADER
  ce=$(load 2709$L); cluster=$(redis-cli -p 2709$L DBSIZE); terms=$(for i in 1 2 3; do redis-cli -p 2709$i INFO | sed -n 's/^raft_term:\(.*\)\r$/\1/p'; done | tr '\n' ' ')
  kill "${PIDS[@]}"; wait "${PIDS[@]}" 2>/dev/null
  echo "round $r: single $single keys ($e) | cluster $cluster keys, raft terms $terms($ce) | redis-server maxmemory 256mb $redis keys ($re) | single/redis $(echo "scale=3; $single/$redis" | bc) cluster/redis $(echo "scale=3; $cluster/$redis" | bc)"
done
rm -rf $D
