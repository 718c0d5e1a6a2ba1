"""What a new user does after `pip install sluice pyspark-client==4.2.0`, checked: a script that
starts the server with `SparkConnectServer()` runs the watermark example of seed document 000
(`../shared/reference/seeds/`, its code taken from the document as it is, with the session line
added) and prints its batches; the lines are checked against what the document says Spark
printed. Run by scripts/wheel-check in a fresh virtualenv holding only the wheel and the client.

    python wheel_check.py SEED_DOCUMENT
"""
import os
import subprocess
import sys
import tempfile

HEADER = '''\
from pyspark.sql import SparkSession
from sluice import SparkConnectServer

server = SparkConnectServer()
spark = SparkSession.builder.remote(server.url).getOrCreate()
'''


def seed_code(path):
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    start = text.index("import json, os, tempfile")
    return text[start:text.index("Ran on local PySpark", start)]


def main():
    script = HEADER + seed_code(sys.argv[1]) + "\nserver.stop()\n"  # stops the session too
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "watermark.py")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(script)
        # As a user runs it: `python watermark.py`, in a directory of its own, TZ unset.
        env = {k: v for k, v in os.environ.items() if k not in ("SLUICE_BIN", "TZ")}
        run = subprocess.run([sys.executable, path], cwd=tmp, env=env, capture_output=True,
                             text=True, timeout=600)
    sys.stdout.write(run.stdout)
    sys.stderr.write(run.stderr)
    if run.returncode != 0:
        sys.exit("wheel-check: the script exited with %d" % run.returncode)
    lines = [line.rstrip() for line in run.stdout.splitlines()]
    # The foreachBatch prints come from the server's Python worker through the server's output,
    # the progress prints from the script itself: each kind in its order.
    batches = [line for line in lines if line.startswith("batch ")]
    progress = [line for line in lines if line.startswith("  progress ")]
    want_batches = [
        "batch 0 [('12:00', 2), ('12:05', 1)]",
        "batch 1 []",
        "batch 2 [('12:00', 3), ('12:20', 1)]",
        "batch 3 []",
        "batch 4 []",
    ]
    want_progress = [
        "  progress 0 rows 3 watermark 00:00 dropped 0",
        "  progress 1 rows 0 watermark 11:57 dropped 0",
        "  progress 2 rows 2 watermark 11:57 dropped 0",
        "  progress 3 rows 0 watermark 12:10 dropped 0",
        "  progress 4 rows 1 watermark 12:10 dropped 1",
    ]
    if batches != want_batches or progress != want_progress:
        sys.exit("wheel-check: the example printed\n%s\n%s\nwhere the seed document says\n%s\n%s"
                 % ("\n".join(batches), "\n".join(progress), "\n".join(want_batches),
                    "\n".join(want_progress)))
    print("wheel-check: the seed's watermark example printed its batches as the document says")


if __name__ == "__main__":
    main()
