#!/usr/bin/env bash
# A bulk load through a 3-member cluster (fresh 256 MiB pools): N pipelined SETs of 16 B values
# (`redis-cli --pipe`), then each member's Raft term, longest turn gap and longest apply from
# INFO, per round. A leader change shows as a term past the first and CLUSTERDOWN replies.
# usage: scripts/kv-pipe-fill.sh PMWIRE N ROUNDS
set -uo pipefail
B=${1:?pmwire binary}; N=${2:-1500000}; R=${3:-3}; D=/dev/shm/kvfill
here=$(cd "$(dirname "$0")" && pwd)
python3 "$here/kv-pipe-gen.py" "$N" 0 > /dev/shm/kvfill.resp
echo "cpu: $("$B" doctor | sed -n 's/^cpu: *//p')"
for r in $(seq "$R"); do
  rm -rf $D; mkdir -p $D
  CL=1=127.0.0.1:27181,2=127.0.0.1:27182,3=127.0.0.1:27183; pids=()
  for i in 1 2 3; do
    extra=(); [ $i = 1 ] && extra=(--create-secret)
    setsid "$B" kv --pool $D/p$i --size 256M --resp 127.0.0.1:2719$i --http 127.0.0.1:2720$i --cluster $CL --id $i --secret-file $D/secret "${extra[@]}" >$D/log$i 2>&1 & pids+=($!)
    [ $i = 1 ] && while [ ! -f $D/secret ]; do sleep 0.05; done
  done
  L=""; for _ in $(seq 200); do for i in 1 2 3; do redis-cli -p 2719$i ROLE 2>/dev/null | head -1 | grep -q master && L=$i; done; [ -n "$L" ] && break; sleep 0.1; done
  start=$(redis-cli -p 2719$L INFO | sed -n 's/^raft_term:\(.*\)\r$/\1/p')
  t0=$(date +%s.%N); redis-cli -p 2719$L --pipe < /dev/shm/kvfill.resp > $D/out 2>&1; t1=$(date +%s.%N)
  down=$(grep -c "^CLUSTERDOWN" $D/out); oom=$(grep -c "^OOM" $D/out)
  info=$(for i in 1 2 3; do redis-cli -p 2719$i INFO | tr -d '\r' | awk -F: -v m=$i '/^raft_term:|^max_turn_gap_us:|^max_apply_us:/{printf "%s=%s ", $1, $2} END{printf "| "}'; done)
  kill "${pids[@]}"; wait "${pids[@]}" 2>/dev/null
  echo "round $r: $(echo "$t1 - $t0" | bc | cut -c1-5) s, term at start $start, CLUSTERDOWN $down, -OOM $oom; members: $info"
done
rm -rf $D /dev/shm/kvfill.resp
