#!/bin/bash
# 3 members; 1-client SETs on the leader; perf sched timehist over 0.5 s of load.
PM=${PM:-/work/main/target/release/pmwire}; D=/tmp/p50d; mkdir -p $D
SECRET=$D/secret; [ -s $SECRET ] || { head -c 32 /dev/urandom > $SECRET; chmod 600 $SECRET; }
rm -f /dev/shm/p5-*
declare -A P
start() { $PM kv --pool /dev/shm/p5-$1.pool --size 512M --raft-size 256M --resp 127.0.0.1:1668$1 --http 127.0.0.1:0 \
    --cluster 1=127.0.0.1:17301,2=127.0.0.1:17302,3=127.0.0.1:17303 --id $1 --peer-transport uring --secret-file $SECRET > $D/m$1.log 2>&1 & P[$1]=$!; }
for id in 1 2 3; do start $id; done
LID=
for i in $(seq 1 80); do for id in 1 2 3; do r=$(redis-cli -p 1668$id ROLE 2>/dev/null | head -1); [ "$r" = master ] && LID=$id; done; [ -n "$LID" ] && break; sleep 0.5; done
echo leader m$LID pid ${P[$LID]}; for id in 1 2 3; do echo m$id ${P[$id]}; done
redis-benchmark -p 1668$LID -c 1 -n 5000 -t set -d 64 -r 100000 -q >/dev/null 2>&1
redis-benchmark -p 1668$LID -c 1 -n 20000 -t set -d 64 -r 100000 -q > $D/rb.txt 2>&1 &
B=$!
sleep 1
perf record -a -g -e raw_syscalls:sys_enter,raw_syscalls:sys_exit,sched:sched_wakeup,sched:sched_switch -o $D/sys.data sleep 0.1 2>/dev/null >/dev/null
wait $B; cat $D/rb.txt | tail -2
kill ${P[1]} ${P[2]} ${P[3]} 2>/dev/null; wait 2>/dev/null; rm -f /dev/shm/p5-*
