#!/usr/bin/env bash
# redis-cli --pipe of N SETs (scripts/kv-pipe-gen.py) through the leader of a fresh 3-member cluster, into a
# single-node pmwire kv and into redis-server with appendfsync always, in ROUNDS interleaved rounds; prints seconds.
# usage: scripts/kv-pipe-ab.sh PMWIRE [N] [ROUNDS]
set -euo pipefail
B=$1; N=${2:-200000}; ROUNDS=${3:-3}
D=$(mktemp -d /dev/shm/kvpipe.XXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$D"; }
trap cleanup EXIT
python3 "$(dirname "$0")/kv-pipe-gen.py" "$N" 0 > $D/in.resp
t() { local s=$(date +%s.%N); local out; out=$(redis-cli -p "$1" --pipe < $D/in.resp 2>&1 | tail -1); echo "$(echo "$(date +%s.%N) - $s" | bc) s ($out)"; }
echo "$(grep 'model name' /proc/cpuinfo | head -1 | cut -d: -f2), $(nproc) CPUs; $N SETs of 16 B per cell"
for r in $(seq "$ROUNDS"); do
  rm -rf $D/p* $D/s* $D/r* $D/secret; pids=()
  CL=1=127.0.0.1:27811,2=127.0.0.1:27812,3=127.0.0.1:27813
  for i in 1 2 3; do
    extra=(); [ $i = 1 ] && extra=(--create-secret)
    "$B" kv --pool $D/p$i --size 256M --resp 127.0.0.1:2782$i --http 127.0.0.1:2783$i --cluster $CL --id $i --secret-file $D/secret "${extra[@]}" --ready-file $D/r$i >/dev/null 2>&1 &
    pids+=($!); [ $i = 1 ] && while [ ! -f $D/secret ]; do sleep 0.05; done
  done
  for f in r1 r2 r3; do while [ ! -f $D/$f ]; do sleep 0.05; done; done
  leader=""; for k in $(seq 100); do for i in 1 2 3; do redis-cli -p 2782$i ROLE 2>/dev/null | head -1 | grep -q master && { leader=$i; break 2; }; done; sleep 0.1; done
  echo "$r,cluster-leader,$(t 2782$leader)"
  for p in "${pids[@]}"; do kill -9 "$p"; done; wait 2>/dev/null || true; pids=()
  "$B" kv --pool $D/single --size 256M --resp 127.0.0.1:27820 --http 127.0.0.1:27830 --ready-file $D/rs >/dev/null 2>&1 & pids+=($!)
  while [ ! -f $D/rs ]; do sleep 0.05; done
  echo "$r,single-node,$(t 27820)"
  kill -9 "${pids[@]}"; wait 2>/dev/null || true; pids=()
  mkdir -p $D/redis; redis-server --port 27821 --dir $D/redis --appendonly yes --appendfsync always --save '' >/dev/null 2>&1 & pids+=($!)
  until redis-cli -p 27821 ping >/dev/null 2>&1; do sleep 0.05; done
  echo "$r,redis-aof-always,$(t 27821)"
  kill -9 "${pids[@]}"; wait 2>/dev/null || true; pids=(); rm -rf $D/redis $D/single*
done
