#!/bin/bash
# usage: [N=2000] kv-forward-copies.sh PMWIRE: three `pmwire kv --cluster` members (kv-cluster-lib.sh: 256 MiB
# pools in a temporary directory, RESP on 2719x, peers on 2718x), `redis-benchmark -c 4 -n N -t set -d 1024`
# through a follower, then each member's `INFO copies` (value bytes copied per stage; docs/bench.md, "Writes
# through a follower").
B=$1
source "$(dirname "$0")/kv-cluster-lib.sh"
D=$(mktemp -d /dev/shm/kvfwd.XXXX)
start_cluster "$B" $D 2718 2719 2720; L=$LEADER
[ -z "$L" ] && { echo "no leader"; kill "${PIDS[@]}"; wait "${PIDS[@]}" 2>/dev/null; rm -rf $D; exit 1; }
F=$(( L % 3 + 1 )); O=$(( F % 3 + 1 ))
echo "leader m$L, serving follower m$F, other follower m$O; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
redis-benchmark -p 2719$F -c 4 -n ${N:-2000} -t set -d 1024 -r 100000 -q 2>&1 | tr '\r' '\n' | grep -a per | tail -1
sleep 0.5
for i in $L $F $O; do echo "m$i: $(redis-cli -p 2719$i INFO copies | tr -d '\r' | grep -E '^copy_value|^copy_writes' | tr '\n' ' ')"; done
kill "${PIDS[@]}"; wait "${PIDS[@]}" 2>/dev/null; rm -rf $D
