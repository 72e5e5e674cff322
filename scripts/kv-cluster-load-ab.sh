#!/usr/bin/env bash
# usage: kv-cluster-load-ab.sh OLD_CHECKOUT NEW_CHECKOUT OUT [N=6]
# Runs `kv_cluster_load` (its test binary, already built in each checkout's
# target/release) from two checkouts in turn, N times each, with a busy loop
# on one core, and writes one line per run to OUT: each member's term,
# longest loop gap (us), Raft messages unsent and held, error replies and the
# load's time. Build first: cargo test --release -p pmwire --test kv_cluster_load --no-run
set -euo pipefail
OLD=$1; NEW=$2; OUT=$3; N=${4:-6}
: > "$OUT"
for r in $(seq 1 "$N"); do
  for v in old new; do
    W=$([ $v = old ] && echo "$OLD" || echo "$NEW")
    B=$(ls -t "$W"/target/release/deps/kv_cluster_load-* | grep -v '\.d$' | head -1)
    yes > /dev/null & Y=$!
    set +e
    T=$( (cd "$W/crates/cli" && "$B" --include-ignored --nocapture 2>&1) ); rc=$?
    set -e
    kill $Y
    f() { echo "$T" | grep "^member" | grep -o "$1:[0-9]*" | cut -d: -f2 | paste -sd, ; }
    terms=$(echo "$T" | grep "^member" | grep -o "raft_term:[0-9]*" | paste -sd' ')
    errs=$(echo "$T" | grep -o "[0-9]* error" | head -1 | cut -d' ' -f1)
    t=$(echo "$T" | grep -o "in [0-9.]*s" | head -1)
    echo "$v r$r rc=$rc $terms  gap_us=$(f max_turn_gap_us), unsent=$(f raft_unsent), held=$(f raft_sends_held), errs=${errs:-0} $t" >> "$OUT"
  done
done
cat "$OUT"
