#!/usr/bin/env bash
# A/B p50 of SET 64 B at 1 client through the leader (docs/bench.md, "A member's loop under load"): a 3-member cluster of build $1 beside one of build $2 and a single-node `pmwire kv` of $2, alternated ROUNDS times (N SETs per cell). Usage: scripts/kv-cluster-ab.sh OLD NEW [ROUNDS]
set -uo pipefail
A=$1; B=$2; ROUNDS=${3:-4}; N=${N:-5000}
D=$(mktemp -d /dev/shm/ab.XXXX); pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$D"; }
trap cleanup EXIT
start() { # name bin base
  local n=$1 bin=$2 b=$3; local CL=1=127.0.0.1:${b}1,2=127.0.0.1:${b}2,3=127.0.0.1:${b}3
  for i in 1 2 3; do extra=(); [ $i = 1 ] && extra=(--create-secret)
    "$bin" kv --pool $D/$n$i --size 256M --resp 127.0.0.1:$((b+10))$i --http 127.0.0.1:$((b+20))$i --cluster $CL --id $i --secret-file $D/$n.secret "${extra[@]}" --ready-file $D/$n.r$i >$D/$n.log$i 2>&1 &
    pids+=($!); [ $i = 1 ] && while [ ! -f $D/$n.secret ]; do sleep 0.05; done; done
  for i in 1 2 3; do while [ ! -f $D/$n.r$i ]; do sleep 0.05; done; done
}
leader() { local b=$1; for t in $(seq 100); do for i in 1 2 3; do redis-cli -p $((b+10))$i ROLE 2>/dev/null | head -1 | grep -q master && { echo $((b+10))$i; return; }; done; sleep 0.1; done; }
start a $A 3860; start b $B 3900
"$B" kv --pool $D/s --size 256M --resp 127.0.0.1:38990 --http 127.0.0.1:38991 --ready-file $D/rs >$D/logs 2>&1 & pids+=($!)
while [ ! -f $D/rs ]; do sleep 0.05; done
LA=$(leader 3860); LB=$(leader 3900); echo "leaders $LA $LB"
p50() { redis-benchmark -p "$1" -c 1 -n "$N" -t set -d 64 -r 100000 --csv 2>/dev/null | tail -1 | cut -d, -f5,7 | tr -d '"'; }
for r in $(seq $ROUNDS); do LA=$(leader 3860); LB=$(leader 3900); echo "round $r: A(p50,p99)=$(p50 $LA) B=$(p50 $LB) single=$(p50 38990) leaders $LA $LB"; done
for n in a b; do grep -h panicked -A1 $D/$n.log* | cut -c1-200; done
