#!/usr/bin/env bash
# CPU per SET of each member (utime+stime from /proc) of a fresh 3-member cluster of build $1 under redis-benchmark -c 64 -n $N SET 64 B over 100 K keys, through the leader (docs/bench.md, "The B+tree's batch apply"). Alternate two builds by hand.
# Usage: N=60000 scripts/kv-cluster-cpu.sh BIN LABEL
set -uo pipefail
BIN=$1; LABEL=$2; N=${N:-60000}; b=3960
D=$(mktemp -d /dev/shm/kvcpu.XXXX); pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$D"; }
trap cleanup EXIT
CL=1=127.0.0.1:${b}1,2=127.0.0.1:${b}2,3=127.0.0.1:${b}3
for i in 1 2 3; do extra=(); [ $i = 1 ] && extra=(--create-secret)
  "$BIN" kv --pool $D/m$i --size 256M --resp 127.0.0.1:$((b+10))$i --http 127.0.0.1:$((b+20))$i --cluster $CL --id $i --secret-file $D/secret "${extra[@]}" --ready-file $D/r$i >$D/log$i 2>&1 &
  pids+=($!); [ $i = 1 ] && while [ ! -f $D/secret ]; do sleep 0.05; done; done
for i in 1 2 3; do while [ ! -f $D/r$i ]; do sleep 0.05; done; done
L=""; for t in $(seq 100); do for i in 1 2 3; do redis-cli -p $((b+10))$i ROLE 2>/dev/null | head -1 | grep -q master && { L=$i; break 2; }; done; sleep 0.1; done
[ -n "$L" ] || { echo "no leader"; exit 1; }
cpu() { awk '{print $14+$15}' /proc/$1/stat; }
declare -a c0; for i in 1 2 3; do c0[$i]=$(cpu ${pids[$((i-1))]}); done
OUT=$(redis-benchmark -p $((b+10))$L -c 64 -n $N -t set -d 64 -r 100000 -q 2>&1 | tr '\r' '\n' | grep -E "SET:" | tail -1)
TCK=$(getconf CLK_TCK); line="$LABEL leader=$L"
for i in 1 2 3; do c1=$(cpu ${pids[$((i-1))]}); us=$(echo "scale=1; ($c1-${c0[$i]})*1000000/$TCK/$N" | bc); role=f; [ $i = $L ] && role=L; line="$line m$i($role)=${us}us"; done
echo "$line $OUT"
grep -h panicked -A1 $D/log* | cut -c1-200
