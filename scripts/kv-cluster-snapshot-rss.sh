#!/usr/bin/env bash
# Peak anonymous memory of the leader while a 4th member is added (whole snapshot taken).
# usage: scripts/kv-cluster-snapshot-rss.sh PMWIRE NKEYS HFIELDS (NKEYS string keys of 16 B values, one hash of HFIELDS fields; loaded by scripts/kv-load.py)
set -euo pipefail
B=$1; N=$2; H=$3
D=$(mktemp -d /dev/shm/snapmem.XXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$D"; }
trap cleanup EXIT
CL=1=127.0.0.1:27511,2=127.0.0.1:27512,3=127.0.0.1:27513
for i in 1 2 3; do
  extra=(); [ $i = 1 ] && extra=(--create-secret)
  "$B" kv --pool $D/p$i --size 2G --raft-size 1G --resp 127.0.0.1:2752$i --http 127.0.0.1:2753$i --cluster $CL --id $i --secret-file $D/secret "${extra[@]}" --ready-file $D/r$i >$D/log$i 2>&1 &
  pids+=($!)
  [ $i = 1 ] && while [ ! -f $D/secret ]; do sleep 0.05; done
done
for f in r1 r2 r3; do while [ ! -f $D/$f ]; do sleep 0.05; done; done
leader=""
for t in $(seq 100); do for i in 1 2 3; do
  if redis-cli -p 2752$i ROLE 2>/dev/null | head -1 | grep -q master; then leader=$i; break 2; fi; done; sleep 0.1; done
lpid=${pids[$((leader-1))]}
python3 "$(dirname "$0")/kv-load.py" 2752$leader $N $H
redis-cli -p 2752$leader DBSIZE
base=$(awk '/RssAnon/{print $2}' /proc/$lpid/status)
"$B" kv --pool $D/p4 --size 2G --raft-size 1G --resp 127.0.0.1:27524 --http 127.0.0.1:27534 --cluster $CL,4=127.0.0.1:27514 --id 4 --join --secret-file $D/secret --ready-file $D/r4 >$D/log4 2>&1 &
pids+=($!)
while [ ! -f $D/r4 ]; do sleep 0.05; done
peak=$base
( "$B" smr --tls uring --peers $CL --secret-file $D/secret --timeout-s 120 add --id 4 --addr 127.0.0.1:27514 --learner > $D/add.out 2>&1; echo done > $D/added ) &
t0=$(date +%s.%N)
while :; do
  r=$(awk '/RssAnon/{print $2}' /proc/$lpid/status); [ "$r" -gt "$peak" ] && peak=$r
  if [ -f $D/added ] && [ "$(redis-cli -p 27524 READONLY >/dev/null; redis-cli -p 27524 DBSIZE 2>/dev/null)" != "" ]; then
    n4=$(printf 'READONLY\nDBSIZE\n' | redis-cli -p 27524 | tail -1)
    [ "$n4" = "$(redis-cli -p 2752$leader DBSIZE)" ] && break
  fi
  sleep 0.02
  if [ $(echo "$(date +%s.%N) - $t0 > 120" | bc) = 1 ]; then echo "timeout"; cat $D/add.out; break; fi
done
t1=$(date +%s.%N)
echo "leader $leader: RssAnon before add ${base} kB, peak during add ${peak} kB, +$((peak-base)) kB; new member caught up (DBSIZE equal) in $(echo "$t1 - $t0" | bc) s"
cat $D/add.out | tail -2
