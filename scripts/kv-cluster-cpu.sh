#!/bin/bash
# usage: [R=100000 (keys)] [N=200000] [SIZE=1G] [C=64] kv-cluster-cpu.sh BIN LABEL: three members of BIN on ports 1648x (RESP) and
# 1710x (peers), pools /dev/shm/wix-* of SIZE; redis-benchmark SET -c C -n N -d 64 -r 100000 on the leader;
# prints SETs/s (empty if the run ended in an error, whose last lines are printed) and each member's CPU
# (utime+stime from /proc/PID/stat) per applied entry in 0.1 us, with the entries applied during the run
# PERF=S: perf records the leader and a follower for S seconds from the start ($D/leader.data, follower.data)
# (docs/bench.md: "WATCH's write index per batch", "The B+tree's batch apply").
PM=$1; L=$2; N=${N:-200000}; SIZE=${SIZE:-1G}
D=${D:-/tmp/wix}; mkdir -p $D
SECRET=${SECRET:-$D/secret}
[ -s "$SECRET" ] || { head -c 32 /dev/urandom > "$SECRET"; chmod 600 "$SECRET"; }
rm -f /dev/shm/wix-*
declare -A P
for id in 1 2 3; do
  $PM kv --pool /dev/shm/wix-$id.pool --size $SIZE --resp 127.0.0.1:1648$id --http 127.0.0.1:0 \
    --cluster 1=127.0.0.1:17101,2=127.0.0.1:17102,3=127.0.0.1:17103 --id $id --peer-transport uring \
    --secret-file "$SECRET" > $D/m$id.log 2>&1 &
  P[$id]=$!
done
stop() { kill ${P[1]} ${P[2]} ${P[3]} 2>/dev/null; wait ${P[1]} ${P[2]} ${P[3]} 2>/dev/null; rm -f /dev/shm/wix-*; }
LID=
for i in $(seq 1 80); do
  for id in 1 2 3; do r=$(redis-cli -p 1648$id ROLE 2>/dev/null | head -1); [ "$r" = master ] && LID=$id; done
  [ -n "$LID" ] && break; sleep 0.5
done
[ -z "$LID" ] && { echo "$L: no leader"; stop; exit 1; }
declare -A T A
off() { redis-cli -p 1648$1 INFO replication 2>/dev/null | tr -d '\r' | awk -F: '/^master_repl_offset:/{print $2}'; }
for id in 1 2 3; do T[$id]=$(awk '{print $14+$15}' /proc/${P[$id]}/stat); A[$id]=$(off $id); done
if [ -n "$PERF" ]; then
  F=$(( LID % 3 + 1 ))
  perf record -F 1999 --call-graph dwarf,16384 -p ${P[$LID]} -o $D/leader.data -- sleep ${PERF} > /dev/null 2>&1 &
  perf record -F 1999 --call-graph dwarf,16384 -p ${P[$F]} -o $D/follower.data -- sleep ${PERF} > /dev/null 2>&1 &
fi
timeout 300 redis-benchmark -p 1648$LID -c ${C:-64} -n $N -t set -d 64 -r ${R:-100000} -q > $D/bench.raw 2>&1
out=$(tr '\r' '\n' < $D/bench.raw | grep -a "requests per second" | tail -1)
[ -z "$out" ] && { echo "$L: benchmark failed: $(tr '\r' '\n' < $D/bench.raw | tail -3 | tr '\n' ' ')"; for id in 1 2 3; do echo "  m$id: $(redis-cli -p 1648$id ROLE 2>/dev/null | head -1) $(tail -2 $D/m$id.log | tr '\n' ' ')"; done; }
rps=$(echo "$out" | awk '{print $2}')
line="$L rps=$rps"
sleep 1
for id in 1 2 3; do
  t=$(awk '{print $14+$15}' /proc/${P[$id]}/stat); a=$(off $id); n=$(( ${a:-0} - ${A[$id]:-0} ))
  [ "$n" -gt 0 ] || n=1
  line="$line m$id$([ $id = $LID ] && echo L)=$(( (t-${T[$id]})*10000*10/n ))/$n"
done
echo "$line  (cpu in 0.1 us per applied entry / entries applied)"
stop
