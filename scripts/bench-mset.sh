#!/usr/bin/env bash
# One MSET of 100,000 pairs against redis-server (no persistence, appendfsync always) and pmwire kv
# (64 MiB and 1 GiB pools). Run under `flock /work/bench.lock`; ports 40640-40643.
set -e
cd "$(dirname "$0")/.."
redis-server --port 40640 --save "" --appendonly no --dir /tmp > /dev/null 2>&1 & R=$!
sleep 0.5; echo -n "redis no persistence: "; taskset -c 1 python3 scripts/mset-client.py 40640; kill $R; wait $R 2>/dev/null || true
mkdir -p /dev/shm/f-aof; redis-server --port 40641 --save "" --appendonly yes --appendfsync always --dir /dev/shm/f-aof > /dev/null 2>&1 & R=$!
sleep 0.5; echo -n "redis appendfsync always: "; taskset -c 1 python3 scripts/mset-client.py 40641; kill $R; wait $R 2>/dev/null || true; rm -rf /dev/shm/f-aof
for size in 64M 1G; do
rm -f /dev/shm/f-mset.pool; taskset -c 0 ./target/release/pmwire kv --pool /dev/shm/f-mset.pool --size $size --resp 127.0.0.1:40642 --http 127.0.0.1:40643 > /dev/null 2>&1 & P=$!
for i in $(seq 100); do redis-cli -p 40642 PING > /dev/null 2>&1 && break; sleep 0.1; done
echo -n "pmwire kv zero-copy, $size pool: "; taskset -c 1 python3 scripts/mset-client.py 40642; kill $P; wait $P 2>/dev/null || true; rm -f /dev/shm/f-mset.pool
done
