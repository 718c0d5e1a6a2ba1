#!/usr/bin/env bash
# Issue 19 part 1: the embedded stores considered for the on-disk state store provider (fjall,
# an LSM; redb, a B-tree), on a streaming aggregation's access pattern: N keys of 24 bytes in
# hash order with 40-byte values loaded in batches of 100,000 (one commit each), then 20
# batches of get + put over the whole key space, then point gets; a 256 MiB cache each.
# Prints each store's clean debug build time (what CI would pay) and its figures.
#   benches/state_store_candidates.sh            KEYS=5000000
set -euo pipefail
cd "$(dirname "$0")/state_store_candidates"
KEYS="${KEYS:-5000000}"
T="${STORE_BENCH_TARGET:-/var/tmp/state-store-candidates-target}"
for e in fjall redb; do
  rm -rf "$T-$e-debug"
  start=$(date +%s.%N)
  CARGO_INCREMENTAL=0 cargo build -q --features "$e" --target-dir "$T-$e-debug"
  echo "$e: clean debug build $(python3 -c "print(round($(date +%s.%N) - $start, 1))") s"
  cargo build -q --release --features "$e" --target-dir "$T-$e-release"
  "$T-$e-release/release/state-store-candidates" "$e" "$KEYS"
done
