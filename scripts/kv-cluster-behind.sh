#!/bin/bash
# A follower far behind a large keyspace (issue 26): three members, MIB MiB of 64 KiB values loaded through the
# leader, a follower killed -9, 30,000 small SETs (the leader compacts past it), the follower restarted: the leader
# sends it a whole snapshot. Prints the worst SET latency of a probe over 6 s (through every member), and per member
# its role, Raft term (1: no election), longest compaction step, longest turn gap, snapshot turns and held entries.
# usage: [PM=path/to/pmwire] [MIB=128] scripts/kv-cluster-behind.sh
PM=${PM:-target/release/pmwire}; D=${D:-/tmp/kvc-behind}; mkdir -p $D; MIB=${MIB:-128}
SECRET=$D/secret; [ -s $SECRET ] || { head -c 32 /dev/urandom > $SECRET; chmod 600 $SECRET; }
rm -f /dev/shm/bh-*
declare -A P
start() { $PM kv --pool /dev/shm/bh-$1.pool --size $((MIB*3+256))M --raft-size $((MIB*3+128))M --resp 127.0.0.1:1658$1 --http 127.0.0.1:0 \
    --cluster 1=127.0.0.1:17201,2=127.0.0.1:17202,3=127.0.0.1:17203 --id $1 --peer-transport uring --secret-file $SECRET >> $D/m$1.log 2>&1 & P[$1]=$!; }
for id in 1 2 3; do start $id; done
LID=
for i in $(seq 1 80); do for id in 1 2 3; do r=$(redis-cli -p 1658$id ROLE 2>/dev/null | head -1); [ "$r" = master ] && LID=$id; done; [ -n "$LID" ] && break; sleep 0.5; done
F=$(( LID % 3 + 1 ))
redis-benchmark -p 1658$LID -c 4 -n $((MIB*16)) -t set -d 65536 -r 100000000 -q >/dev/null 2>&1
term() { redis-cli -p 1658$1 INFO replication | tr -d '\r' | awk -F: "/^$2:/{print \$2}"; }
echo "leader $LID, follower $F killed; keys $(redis-cli -p 1658$LID DBSIZE)"
kill -9 ${P[$F]}; wait ${P[$F]} 2>/dev/null
redis-benchmark -p 1658$LID -c 16 -n 30000 -t set -d 64 -r 100000 -q >/dev/null 2>&1
T0=$(term $LID raft_term); echo "term before the restart $T0, leader snapshots $(term $LID raft_snapshots)"
start $F
# SET latency probe while it catches up
python3 - $LID <<'PY'
import socket,time,sys
lid=sys.argv[1]
worst=0; errs=0; t_end=time.time()+6
while time.time()<t_end:
    for port in (16581,16582,16583):
        try:
            s=socket.create_connection(('127.0.0.1',port),timeout=3)
            t=time.time(); s.sendall(b'*3\r\n$3\r\nSET\r\n$5\r\nprobe\r\n$1\r\nx\r\n'); r=s.recv(100); d=time.time()-t; s.close()
            if r.startswith(b'+OK'): worst=max(worst,d)
            else: errs+=1
        except Exception as e: errs+=1
    time.sleep(0.01)
print("probe: worst SET %.0f ms, errors %d" % (worst*1000, errs))
PY
for id in 1 2 3; do echo "m$id: role $(term $id role) term $(term $id raft_term) max_compact_us $(term $id max_compact_us) max_turn_gap_us $(term $id max_turn_gap_us) turns $(term $id raft_snapshot_turns) held $(term $id raft_entries_held) elections $(term $id elections_started)"; done
kill ${P[1]} ${P[2]} ${P[3]} 2>/dev/null; wait 2>/dev/null; rm -f /dev/shm/bh-*
