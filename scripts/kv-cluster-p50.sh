#!/usr/bin/env bash
# A first number for `pmwire kv --cluster` (issue 26 item 2): SET of 64 B, one
# closed-loop client (redis-benchmark -c 1), p50 through the leader of a
# 3-member cluster on loopback and through a follower (which forwards to
# the leader), beside a single-node `pmwire kv` in the same run, alternated
# ROUNDS times. Usage: scripts/kv-cluster-p50.sh [PMWIRE] [ROUNDS]
set -euo pipefail
B=${1:-target/release/pmwire}
ROUNDS=${2:-3}
N=${N:-20000}
D=$(mktemp -d /dev/shm/kvc-p50.XXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$D"; }
trap cleanup EXIT
CL=1=127.0.0.1:27411,2=127.0.0.1:27412,3=127.0.0.1:27413
for i in 1 2 3; do
  extra=(); [ $i = 1 ] && extra=(--create-secret)
  "$B" kv --mode ${MODE:-zero-copy} --pool $D/p$i --size 256M --resp 127.0.0.1:2742$i --http 127.0.0.1:2743$i --cluster $CL --id $i --secret-file $D/secret "${extra[@]}" --ready-file $D/r$i >$D/log$i 2>&1 &
  pids+=($!)
  [ $i = 1 ] && while [ ! -f $D/secret ]; do sleep 0.05; done
done
"$B" kv --pool $D/single --size 256M --resp 127.0.0.1:27420 --http 127.0.0.1:27430 --ready-file $D/rs >$D/logs 2>&1 &
pids+=($!)
for f in r1 r2 r3 rs; do while [ ! -f $D/$f ]; do sleep 0.05; done; done
leader=""
for t in $(seq 100); do
  for i in 1 2 3; do
    if redis-cli -p 2742$i ROLE 2>/dev/null | head -1 | grep -q master; then leader=$i; break 2; fi
  done
  sleep 0.1
done
[ -n "$leader" ] || { echo "no leader"; exit 1; }
follower=$(( leader % 3 + 1 ))
echo "leader: member $leader; $(grep 'model name' /proc/cpuinfo | head -1 | cut -d: -f2), $(nproc) CPUs; N=$N SETs of 64 B per cell"
bench() { redis-benchmark -p "$1" -c 1 -n "$N" -t set -d ${D_BYTES:-64} -r 100000 --csv 2>/dev/null | tail -1; }
echo 'round,server,"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"'
for r in $(seq "$ROUNDS"); do
  echo "$r,cluster-leader,$(bench 2742$leader)"
  echo "$r,cluster-follower,$(bench 2742$follower)"
  echo "$r,single-node,$(bench 27420)"
done
for i in 1 2 3; do redis-cli -p 2742$i INFO replication | grep -E 'role|raft_last' | tr -d '\r' | tr '\n' ' '; echo; done
