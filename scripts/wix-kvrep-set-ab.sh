#!/bin/bash
# Interleaved A/B of binaries $BINS/pmwire-{base,wix,main} (the branch's base 2f8eac3, the branch,
# main's build), 3 rounds; a run that ends in CLUSTERDOWN (an election under load) is reported and
# retried (at most 3 tries). Output: results/wix-write-index-ab.txt.
BINS=${BINS:-/tmp/wix}
for round in 1 2 3; do
  for v in base wix main; do
    for try in 1 2 3; do
      out=$($(dirname "$0")/kv-cluster-cpu.sh $BINS/pmwire-$v "round$round $v")
      echo "$out"
      echo "$out" | grep -q "benchmark failed" || break
    done
  done
done
