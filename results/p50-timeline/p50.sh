#!/bin/bash
# 3 members; 1-client SETs on the leader; perf stat of each member over the load.
# usage: PM=... N=20000 C=1 [PERFREC=1|TRACE=1|STRACE=1|SCHED=1|SYSCALLS=1] p50.sh
PM=${PM:-/work/main/target/release/pmwire}; D=/tmp/p50d; mkdir -p $D; N=${N:-20000}; C=${C:-1}
SECRET=$D/secret; [ -s $SECRET ] || { head -c 32 /dev/urandom > $SECRET; chmod 600 $SECRET; }
rm -f /dev/shm/p5-*
declare -A P
start() { $PM kv --pool /dev/shm/p5-$1.pool --size 512M --raft-size 256M --resp 127.0.0.1:1668$1 --http 127.0.0.1:0 \
    --cluster 1=127.0.0.1:17301,2=127.0.0.1:17302,3=127.0.0.1:17303 --id $1 --peer-transport uring --secret-file $SECRET > $D/m$1.log 2>&1 & P[$1]=$!; }
for id in 1 2 3; do start $id; done
LID=
for i in $(seq 1 80); do for id in 1 2 3; do r=$(redis-cli -p 1668$id ROLE 2>/dev/null | head -1); [ "$r" = master ] && LID=$id; done; [ -n "$LID" ] && break; sleep 0.5; done
redis-benchmark -p 1668$LID -c $C -n 5000 -t set -d 64 -r 100000 -q >/dev/null 2>&1
F=$(( LID % 3 + 1 ))
declare -A U0 S0
for id in 1 2 3; do read U0[$id] S0[$id] < <(awk '{print $14, $15}' /proc/${P[$id]}/stat); done
[ -n "$PERFREC" ] && { perf record -e cpu-clock -F 500 --call-graph dwarf,16384 -p ${P[$LID]} -o $D/leader.data 2>/dev/null & R1=$!; perf record -e cpu-clock -F 500 --call-graph dwarf,16384 -p ${P[$F]} -o $D/follower.data 2>/dev/null & R2=$!; sleep 0.3; }
[ -n "$TRACE" ] && { for id in 1 2 3; do perf stat -e raw_syscalls:sys_enter,io_uring:io_uring_submit_req,io_uring:io_uring_complete,io_uring:io_uring_cqring_wait,io_uring:io_uring_poll_arm,io_uring:io_uring_task_add -p ${P[$id]} -o $D/trace$id.txt 2>/dev/null & T[$id]=$!; done; sleep 0.3; }
# SCHED=1: perf sched timehist's data (all CPUs) for 0.4 s one second into the load ($D/sched.data);
# SYSCALLS=1: system calls and wake-ups with their stacks for 0.1 s ($D/sys.data).
[ -n "$SCHED" ] && { (sleep 1; perf sched record -a -o $D/sched.data sleep 0.4 >/dev/null 2>&1) & }
[ -n "$SYSCALLS" ] && { (sleep 1; perf record -a -g -e raw_syscalls:sys_enter,raw_syscalls:sys_exit,sched:sched_wakeup,sched:sched_switch -o $D/sys.data sleep 0.1 >/dev/null 2>&1) & }
[ -n "$STRACE" ] && { strace -c -f -p ${P[$LID]} -o $D/strace-leader.txt 2>/dev/null & S1=$!; strace -c -f -p ${P[$F]} -o $D/strace-follower.txt 2>/dev/null & S2=$!; sleep 0.5; }
redis-benchmark -p 1668$LID -c $C -n $N -t set -d 64 -r 100000 --precision 1 -P ${PIPE:-1} 2>&1 | grep -E "50.000%|requests per second|throughput summary" -A1 | head -6
[ -n "$PERFREC" ] && { kill -INT $R1 $R2; sleep 2; }
[ -n "$TRACE" ] && { for id in 1 2 3; do kill -INT ${T[$id]}; done; sleep 1; for id in 1 2 3; do echo "m$id: $(grep -E "raw_sys|io_uring" $D/trace$id.txt | awk -v n=$N '{gsub(",","",$1); printf "%s=%.2f ", $2, $1/n}')"; done; }
[ -n "$STRACE" ] && { kill -INT $S1 $S2; sleep 1; }
for id in 1 2 3; do read u s < <(awk '{print $14, $15}' /proc/${P[$id]}/stat); echo "m$id $( [ $id = $LID ] && echo leader || echo follower): user/op $(( (u-U0[$id])*10000/N )) us sys/op $(( (s-S0[$id])*10000/N )) us; $(grep -E "ctxt" /proc/${P[$id]}/status | tr '\n' ' ')"; done
kill ${P[1]} ${P[2]} ${P[3]} 2>/dev/null; wait 2>/dev/null; rm -f /dev/shm/p5-*
