#!/usr/bin/env bash
# Throughput of durable SETs of one large value (issue 15, item 8): pmwire kv (zero-copy, values
# received into the pool as chained extents) against redis-server without persistence and with
# appendfsync always, all driven by the same redis-benchmark (one connection, the same key).
# The server is pinned to CPU 0, redis-benchmark to CPU 1; run under `flock /work/bench.lock`.
#
# Usage: scripts/bench-big-set.sh [value bytes] [requests] [port base] [out file]
set -euo pipefail
SIZE=${1:-67108864}
N=${2:-12}
PORT=${3:-40620}
OUT=${4:-results/big-set-$(date -u +%Y%m%d-%H%M%S).txt}
PMWIRE=${PMWIRE:-target/release/pmwire}
DIR=$(mktemp -d /dev/shm/f-bigset.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$DIR"' EXIT

wait_port() { for _ in $(seq 200); do redis-cli -p "$1" PING >/dev/null 2>&1 && return 0; sleep 0.05; done; return 1; }

# redis-benchmark's SET rate in requests per second (its -q line: "SET: 8.50 requests per second, ...").
rate() {
  taskset -c 1 redis-benchmark -p "$1" -t set -d "$SIZE" -n "$N" -c 1 -P 1 -q 2>/dev/null |
    tr '\r' '\n' | grep -o 'SET: [0-9.]* requests per second' | tail -1 | awk '{print $2}'
}

run() { # name, port, command...
  local name=$1 port=$2
  shift 2
  taskset -c 0 "$@" >"$DIR/$name.log" 2>&1 &
  local pid=$!
  wait_port "$port"
  local rps
  rps=$(rate "$port")
  local mbs
  mbs=$(awk -v r="$rps" -v s="$SIZE" 'BEGIN { printf "%.1f", r * s / 1e6 }')
  printf '%-28s %8s SET/s  %8s MB/s\n' "$name" "$rps" "$mbs" | tee -a "$OUT"
  kill "$pid"
  wait "$pid" 2>/dev/null || true
}

mkdir -p "$(dirname "$OUT")"
echo "# $(date -u +%FT%TZ) SET of $SIZE B x $N, redis-benchmark -c 1 (CPU 1), server on CPU 0" | tee "$OUT"
for round in 1 2 3; do
  echo "## round $round" | tee -a "$OUT"
  run "redis no persistence" "$PORT" redis-server --port "$PORT" --save "" --appendonly no --dir "$DIR"
  mkdir -p "$DIR/aof"
  run "redis appendfsync always" $((PORT + 1)) redis-server --port $((PORT + 1)) --save "" --appendonly yes \
    --appendfsync always --dir "$DIR/aof"
  rm -rf "$DIR/aof"
  run "pmwire kv zero-copy" $((PORT + 2)) "$PMWIRE" kv --pool "$DIR/kv.pool" --size 2G \
    --resp 127.0.0.1:$((PORT + 2)) --http 127.0.0.1:$((PORT + 3))
  rm -f "$DIR/kv.pool"
done
