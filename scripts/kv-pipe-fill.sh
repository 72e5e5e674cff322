#!/usr/bin/env bash
# A bulk load through a 3-member cluster (fresh 256 MiB pools): N pipelined SETs of 16 B values
# (`redis-cli --pipe`), then each member's Raft term, longest turn gap and longest apply from
# INFO, per round. A leader change shows as a term past the first and CLUSTERDOWN replies.
# usage: scripts/kv-pipe-fill.sh PMWIRE N ROUNDS
set -uo pipefail
source "$(dirname "$0")/kv-cluster-lib.sh"
B=${1:?pmwire binary}; N=${2:-1500000}; R=${3:-3}; D=/dev/shm/kvfill
here=$(cd "$(dirname "$0")" && pwd)
python3 "$here/kv-pipe-gen.py" "$N" 0 > /dev/shm/kvfill.resp
echo "cpu: $("$B" doctor | sed -n 's/^cpu: *//p')"
for r in $(seq "$R"); do
  rm -rf $D; mkdir -p $D
  start_cluster "$B" $D 2718 2719 2720; L=$LEADER
  start=$(redis-cli -p 2719$L INFO | sed -n 's/^raft_term:\(.*\)\r$/\1/p')
  t0=$(date +%s.%N); redis-cli -p 2719$L --pipe < /dev/shm/kvfill.resp > $D/out 2>&1; t1=$(date +%s.%N)
  down=$(grep -c "^CLUSTERDOWN" $D/out); oom=$(grep -c "^OOM" $D/out)
  info=$(for i in 1 2 3; do redis-cli -p 2719$i INFO | tr -d '\r' | awk -F: -v m=$i '/^raft_term:|^max_turn_gap_us:|^max_apply_us:/{printf "%s=%s ", $1, $2} END{printf "| "}'; done)
  kill "${PIDS[@]}"; wait "${PIDS[@]}" 2>/dev/null
  echo "round $r: $(echo "$t1 - $t0" | bc | cut -c1-5) s, term at start $start, CLUSTERDOWN $down, -OOM $oom; members: $info"
done
rm -rf $D /dev/shm/kvfill.resp
