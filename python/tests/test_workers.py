"""A PySpark streaming query on `sluice connect --workers ...` (the binary's feature
`distributed`): two `sluice worker` processes read the batches' files (a file a batch, the
batches spread over both workers), the query gives the rows it gives in one process, and its
progress (`workers`) counts the workers' tasks."""
import json
import os
import subprocess

import pytest

import servers
from conftest import ENGINE, close_session, new_session, progress_dict

pytestmark = [pytest.mark.streaming,
              pytest.mark.skipif(ENGINE != "sluice", reason="`sluice worker` is Sluice's")]

SCHEMA = "id INT, user STRING, amount DOUBLE"


def start_worker():
    proc = subprocess.Popen([servers.sluice_bin(), "worker", "--listen", "127.0.0.1:0"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            start_new_session=True)
    line = proc.stdout.readline().strip()
    if not line.startswith("Sluice worker listening on "):
        proc.kill()
        raise RuntimeError("`sluice worker` said %r (is the binary built with the feature "
                           "`distributed`? scripts/test builds it so)" % line)
    return proc, line[len("Sluice worker listening on "):]


def test_a_query_over_spark_connect_runs_its_batches_on_the_workers(workdir):
    workers = [start_worker() for _ in range(2)]
    server = servers.Server("sluice", log_path=os.path.join(workdir, "server.log"), cwd=workdir,
                            extra_args=["--workers", ",".join(a for _, a in workers)])
    spark = None
    try:
        server.start()
        spark = new_session(server.url)
        src = os.path.join(workdir, "in")
        os.makedirs(src)
        expected = []
        for k in range(3):
            rows = [{"id": k * 10 + j, "user": "u%d" % (j % 3), "amount": float(j)}
                    for j in range(10)]
            with open(os.path.join(src, "%d.json" % k), "w") as fh:
                fh.writelines(json.dumps(r) + "\n" for r in rows)
            expected += [(r["id"], r["user"].upper()) for r in rows if r["amount"] > 3]
        from pyspark.sql import functions as F
        q = (spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(src)
             .where("amount > 3").select("id", F.upper("user").alias("user"))
             .writeStream.format("memory").queryName("on_workers").start())
        q.processAllAvailable()
        got = sorted((r["id"], r["user"]) for r in spark.table("on_workers").collect())
        assert got == sorted(expected)
        progress = [progress_dict(p) for p in q.recentProgress]
        tasks = {}
        for p in progress:
            for w in p.get("workers", []):
                tasks[w["address"]] = tasks.get(w["address"], 0) + w["numTasks"]
        assert set(tasks) == {a for _, a in workers}, progress
        assert all(n > 0 for n in tasks.values())
        q.stop()
    finally:
        if spark is not None:
            close_session(spark)
        server.stop()
        for proc, _ in workers:
            proc.kill()
            proc.wait()
