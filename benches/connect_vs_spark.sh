#!/usr/bin/env bash
# Sluice's Spark Connect server next to the real one, on this machine, in one run:
#   benches/connect_vs_spark.sh [--batches N] [--only spark|sluice]
# Start-up time (until `spark.range(1).collect()` answers), per-batch overhead of a 1-row
# file-to-foreachBatch query (a running processingTime=0 query, and availableNow runs), and the
# peak memory of each server with its child processes. Prints one JSON line
# (benches/connect_vs_spark.py says what each figure is).
#
# Sets up, each once, outside the clone (${SLUICE_TOOLS:-~/.cache/sluice}):
#   - venv-connect (scripts/connect-venv): pyspark-client 4.2.0, the client, and the Python
#     worker Sluice starts for foreachBatch;
#   - venv-spark: `pip install "pyspark[connect]==4.2.0"`, which ships Spark's jars; its server
#     is started with `spark-submit --class org.apache.spark.sql.connect.service.SparkConnectServer`
#     (Java 17), PYSPARK_PYTHON set to that venv's python for its foreachBatch worker.
# Sluice's server is $SLUICE_BIN, default $CARGO_TARGET_DIR/debug/sluice (CARGO_TARGET_DIR
# defaulting to /var/tmp/sluice-target), built with `cargo build -p sluice-cli`
# (use a --release build for figures worth publishing: SLUICE_BIN=.../release/sluice).
set -euo pipefail
cd "$(dirname "$0")/.."

tools="${SLUICE_TOOLS:-$HOME/.cache/sluice}"
spark_venv="$tools/venv-spark"
client_py="$(scripts/connect-venv)"

if ! "$spark_venv/bin/python" -c 'import pyspark, pandas, pyarrow, grpc; assert pyspark.__version__ == "4.2.0"' >/dev/null 2>&1; then
  echo "connect_vs_spark: creating $spark_venv (pyspark[connect]==4.2.0, ~450 MB)" >&2
  rm -rf "$spark_venv"
  python3 -m venv "$spark_venv"
  "$spark_venv/bin/python" -m pip install --quiet --disable-pip-version-check "pyspark[connect]==4.2.0" "pandas<3"
fi
type -P java >/dev/null || { echo "connect_vs_spark: java (17) is needed for Spark's server" >&2; exit 1; }

export SLUICE_SPARK_PYTHON="$spark_venv/bin/python"
exec "$client_py" benches/connect_vs_spark.py "$@"
