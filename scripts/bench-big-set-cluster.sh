#!/bin/bash
# usage: [SIZE=2G] [ROUNDS=3] [EXTRA="--tick-ms 30"] bench-big-set-cluster.sh BIN BYTES OUT: durable SETs of BYTES through
# `scripts/big-set-client.py` (a SET streamed in 1 MiB writes, timed to its reply, then a GET compared byte
# for byte), interleaved round by round against: a single-node `pmwire kv` (zero-copy), the leader of a
# 3-member `pmwire kv --cluster` and one of its followers (issue 26 item 6: streamed values). Pools of SIZE on
# /dev/shm, ports 1649x; EXTRA is added to each member's command line. After each cluster round: the leader's
# INFO copies and INFO stats lines, every member's Raft term (a change means an election during the round) and
# its loop's longest stalls (INFO replication's max_*_us, elections_started).
# Writes lines to OUT (docs/bench.md, "Streamed values").
PM=$1; BYTES=$2; OUT=$3; SIZE=${SIZE:-2G}; ROUNDS=${ROUNDS:-3}
[ -n "$OUT" ] || { echo "usage: bench-big-set-cluster.sh BIN BYTES OUT" >&2; exit 2; }
D=$(mktemp -d); SECRET=$D/secret; head -c 32 /dev/urandom > $SECRET; chmod 600 $SECRET
HERE=$(dirname "$0")
echo "# $(date -u +%FT%TZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs) BYTES=$BYTES SIZE=$SIZE EXTRA=\"$EXTRA\" build $(git -C $(dirname "$0") rev-parse --short HEAD)" | tee -a "$OUT"
single() {
  rm -f /dev/shm/bbs-*
  $PM kv --pool /dev/shm/bbs-s.pool --size $SIZE --resp 127.0.0.1:16490 --http 127.0.0.1:0 > $D/s.log 2>&1 &
  local p=$!
  for i in $(seq 1 50); do redis-cli -p 16490 PING >/dev/null 2>&1 && break; sleep 0.2; done
  echo "single: $(python3 $HERE/big-set-client.py 16490 $BYTES | tr '\n' ' ')" | tee -a "$OUT"
  kill $p; wait $p 2>/dev/null; rm -f /dev/shm/bbs-*
}
cluster() {
  rm -f /dev/shm/bbs-*
  local P=()
  for id in 1 2 3; do
    $PM kv --pool /dev/shm/bbs-$id.pool --size $SIZE --resp 127.0.0.1:1649$id --http 127.0.0.1:0 \
      --cluster 1=127.0.0.1:17201,2=127.0.0.1:17202,3=127.0.0.1:17203 --id $id --peer-transport uring $EXTRA \
      --secret-file $SECRET > $D/m$id.log 2>&1 &
    P+=($!)
  done
  local L= F=
  for i in $(seq 1 80); do
    for id in 1 2 3; do [ "$(redis-cli -p 1649$id ROLE 2>/dev/null | head -1)" = master ] && L=$id; done
    [ -n "$L" ] && break; sleep 0.5
  done
  if [ -z "$L" ]; then echo "cluster: NOT RUN (no leader)" | tee -a "$OUT"; kill ${P[@]}; return; fi
  F=$(( L % 3 + 1 ))
  term() { redis-cli -p 1649$1 INFO replication 2>/dev/null | tr -d '\r' | awk -F: '/^raft_term:/{print $2}'; }
  local T0=$(term $L)
  echo "cluster leader: $(python3 $HERE/big-set-client.py 1649$L $BYTES | tr '\n' ' ')" | tee -a "$OUT"
  echo "cluster follower: $(python3 $HERE/big-set-client.py 1649$F $BYTES | tr '\n' ' ')" | tee -a "$OUT"
  echo "  leader $(redis-cli -p 1649$L INFO copies | tr -d '\r' | grep -E 'copy_writes|copy_value_bytes_(rx_args|entry|raft_log|applied|path)' | tr '\n' ' ')" | tee -a "$OUT"
  echo "  terms: at start $T0, after: $(term 1) $(term 2) $(term 3)" | tee -a "$OUT"
  for id in 1 2 3; do
    echo "  member $id$([ $id = $L ] && echo ' (leader)'): $(redis-cli -p 1649$id INFO replication | tr -d '\r' | awk -F: '/^max_(turn_gap|apply)_us|^max_election_elapsed|^elections_started/{printf "%s=%s ", $1, $2}')" | tee -a "$OUT"
  done
  echo "  leader $(redis-cli -p 1649$L INFO stats | tr -d '\r' | grep -E '^streamed|^raft_proposals' | tr '\n' ' ')" | tee -a "$OUT"
  kill ${P[@]}; wait ${P[@]} 2>/dev/null; rm -f /dev/shm/bbs-*
}
for r in $(seq 1 $ROUNDS); do single; cluster; done
rm -rf $D
