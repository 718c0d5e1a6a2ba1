#!/usr/bin/env bash
# The `--ui` dashboard under load (issue 18 part 9): the real `sluice` binary runs a small
# pipeline with `--ui 127.0.0.1:0` while the test holds 5,000 idle connections, 8 clients send
# 64 MiB headers, 8 send heads a byte at a time and 4 ask for the history without reading it,
# for 8 seconds, on 127.0.0.1 only. Prints the latency of /api/progress under that load and
# sluice's RSS and thread count; fails past 2 s, 200 MiB or 64 threads. Debug build, as CI.
# It is an ordinary test of crates/cli/tests/integration/dashboard.rs (this runs it alone).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/sluice-target}"
# 5,000 client sockets in the test process, plus the server's.
ulimit -n "$(( $(ulimit -Hn) < 20000 ? $(ulimit -Hn) : 20000 ))"
cargo test -p sluice-cli --test integration -- --nocapture dashboard::
