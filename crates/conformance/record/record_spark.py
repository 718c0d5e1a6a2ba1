#!/usr/bin/env python3
"""Correctness oracle: run conformance scenarios on real Apache Spark (PySpark) and write the
observed results back into the scenario files.

Usage:
    TZ=UTC python3 record_spark.py [--check-determinism] [--no-write] [--keep-tmp]
                                [--timings FILE] [--log FILE] SCENARIO.json [...]

Each scenario runs exactly as shared/conformance/FORMAT.md describes, with the extensions of
crates/conformance/scenarios/README.md (Sluice's own corpus):
  * scenario-level "conf": {key: value} is set with spark.conf.set before the views and the
    query are built, and restored after the scenario (so scenarios never leak into each other);
  * source format "text" (Spark's text source: one column `value STRING`, one row per line);
  * nested output values: a Row (struct) becomes a JSON object in field order, a dict (map) a
    JSON object whose keys are the canonical key values rendered as strings, a list a list;
  * an expected error carries Spark's error class (`class`) when Spark has one; a `kind` added
    by hand to an earlier recording is kept when the run fails again.
As in FORMAT.md:
  * fresh temp dirs per scenario (one directory per streaming source, a staging dir and a
    checkpoint dir);
  * for each run: files are written into the staging dir, given a strictly increasing
    modification time (in the order listed, across runs), then renamed atomically into the
    source directory;
  * per streaming source: readStream.format(fmt).schema(schema).options(...).load(dir),
    then withWatermark, then dropDuplicates / dropDuplicatesWithinWatermark, then
    createOrReplaceTempView(name); static sources become a batch DataFrame view;
  * spark.sql(query).writeStream.outputMode(mode).foreachBatch(capture)
    .option('checkpointLocation', ckpt).trigger(availableNow=True).start(); awaitTermination();
  * per batch: numInputRows, eventTime.watermark and stateOperators sums from
    query.recentProgress; the executed batch ids come from the checkpoint's commits/ log, so a
    batch for which the sink was not called still appears (rows []).

With --check-determinism every scenario is executed twice (fresh dirs each time) and the two
observations must be identical; a difference is reported and the file is not written.
"""
import argparse
import atexit
import datetime as _dt
import decimal
import json
import os
import re
import shutil
import sys
import tempfile
import time
import traceback

os.environ["TZ"] = "UTC"
time.tzset()

SPARK = None


# --------------------------------------------------------------------------------------------
# Spark session
# --------------------------------------------------------------------------------------------

EXTRA_CONF = {}
WAREHOUSE = tempfile.mkdtemp(prefix="oracle-warehouse-")  # unused, keeps ./spark-warehouse away
atexit.register(shutil.rmtree, WAREHOUSE, True)


def get_spark():
    global SPARK
    if SPARK is None:
        from pyspark.sql import SparkSession
        b = SparkSession.builder
        for k, v in EXTRA_CONF.items():
            b = b.config(k, v)
        SPARK = (
            b.master("local[2]")
            .appName("conformance-oracle")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.ui.enabled", "false")
            .config("spark.driver.memory", "1g")
            .config("spark.driver.extraJavaOptions", "-Duser.timezone=UTC")
            .config("spark.executor.extraJavaOptions", "-Duser.timezone=UTC")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.warehouse.dir", WAREHOUSE)
            .getOrCreate()
        )
        SPARK.sparkContext.setLogLevel("OFF")
    return SPARK


# --------------------------------------------------------------------------------------------
# Canonical values (FORMAT.md "Canonical values")
# --------------------------------------------------------------------------------------------

def canon_ts(dt):
    if dt.tzinfo is not None:
        dt = dt.astimezone(_dt.timezone.utc).replace(tzinfo=None)
    s = dt.strftime("%Y-%m-%dT%H:%M:%S")
    if dt.microsecond:
        s += ("." + "%06d" % dt.microsecond).rstrip("0")
    return s


def canon_key(k):
    """A map key as a JSON object key: the canonical value, as a string (ints as decimal)."""
    c = canon_value(k)
    if c is None:
        raise ValueError("a map with a null key cannot be represented in the scenario JSON")
    if isinstance(c, str):
        return c
    return json.dumps(c, ensure_ascii=False, separators=(",", ":"))


def canon_value(v):
    if v is None:
        return None
    if hasattr(v, "__fields__"):  # pyspark Row (a struct): an object in field order
        return {f: canon_value(x) for f, x in zip(v.__fields__, v)}
    if isinstance(v, dict):  # a map
        out = {}
        for k, x in v.items():
            key = canon_key(k)
            if key in out:
                raise ValueError("map keys %r collide in the scenario JSON" % key)
            out[key] = canon_value(x)
        return out
    if isinstance(v, bool):
        return v
    if isinstance(v, _dt.datetime):
        return canon_ts(v)
    if isinstance(v, _dt.date):
        return v.isoformat()
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        if v != v or v in (float("inf"), float("-inf")):
            raise ValueError("NaN/Infinity cannot be represented in the scenario JSON")
        return v
    if isinstance(v, decimal.Decimal):
        return int(v) if v == v.to_integral_value() else float(v)
    if isinstance(v, str):
        return v
    if isinstance(v, (list, tuple)) and not hasattr(v, "__fields__"):
        return [canon_value(x) for x in v]
    raise ValueError("unsupported output value %r (%s)" % (v, type(v).__name__))


def canon_watermark(s):
    # progress watermark: '2026-09-15T12:10:00.000Z'
    if s is None:
        return None
    d = _dt.datetime.strptime(s.rstrip("Z"), "%Y-%m-%dT%H:%M:%S.%f")
    return canon_ts(d)


def row_sort_key(r):
    return json.dumps(r, sort_keys=True)


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------

def java_chain(exc):
    """[(java class name, error class or None, message)] from outermost to root cause."""
    from pyspark import SparkContext
    from py4j.java_gateway import is_instance_of
    gw = SparkContext._gateway
    t = getattr(exc, "_origin", None)
    if t is None:
        t = getattr(exc, "java_exception", None)
    out = []
    seen = 0
    while t is not None and seen < 20:
        seen += 1
        ec = None
        try:
            if is_instance_of(gw, t, "org.apache.spark.SparkThrowable"):
                ec = t.getErrorClass()
        except Exception:
            ec = None
        try:
            msg = t.getMessage()
        except Exception:
            msg = None
        out.append((t.getClass().getName(), ec, msg or ""))
        try:
            t = t.getCause()
        except Exception:
            t = None
    return out


def fragment(msg):
    """A short, characteristic, verbatim piece of an error message: its first sentence."""
    line = msg.strip().splitlines()[0] if msg.strip() else ""
    while line.startswith("[") and "] " in line:
        line = line[line.index("] ") + 2:]
    m = re.search(r"[.!;:](\s|$)", line)
    if m and m.start() >= 20:
        line = line[:m.start()]
    if len(line) > 150:
        cut = line[:150]
        line = cut[:cut.rindex(" ")] if " " in cut[80:] else cut
    return line.strip()


WRAPPER_CLASSES = {"STREAM_FAILED"}


def error_expectation(exc, chain=None):
    """expect_error from a failure. `chain` (from inside the foreachBatch callback, where the
    real Java exception is still visible) is preferred over the outer exception, which for
    failures inside the sink only carries a Python traceback."""
    if not chain:
        chain = java_chain(exc)
    if not chain:
        ec = getattr(exc, "getErrorClass", lambda: None)()
        chain = [(type(exc).__name__, ec, str(exc))]
    # The most specific error class: the deepest one that is not a generic wrapper.
    chosen = None
    for jcls, ec, msg in chain:
        if ec and ec not in WRAPPER_CLASSES:
            chosen = (jcls, ec, msg)
    if chosen is not None:
        return {"class": chosen[1], "contains": fragment(chosen[2])}, chain
    # No specific error class: the root cause's message (deepest non-empty one).
    for jcls, ec, msg in reversed(chain):
        if msg.strip():
            return {"contains": fragment(msg)}, chain
    return {"contains": ""}, chain


# --------------------------------------------------------------------------------------------
# Running one scenario
# --------------------------------------------------------------------------------------------

class Clock:
    """Strictly increasing file modification times, so that file order is the listed order."""

    def __init__(self):
        self.t = int(time.time()) - 100000

    def next(self):
        self.t += 10
        return self.t


def list_batches(dirpath):
    if not os.path.isdir(dirpath):
        return set()
    return {int(n) for n in os.listdir(dirpath) if n.isdigit()}


def build_views(spark, scenario, srcdirs):
    for name, src in scenario["sources"].items():
        fmt = src["format"]
        if fmt == "static":
            rows = src.get("rows", [])
            if rows:
                rdd = spark.sparkContext.parallelize([json.dumps(r) for r in rows], 1)
                df = spark.read.schema(src["schema"]).json(rdd)
            else:
                df = spark.createDataFrame([], src["schema"])
        elif fmt in ("json", "csv", "text"):
            reader = spark.readStream.format(fmt).schema(src.get("schema") or "value STRING")
            if fmt == "csv":
                reader = reader.option("header", "true")
            for k, v in (src.get("options") or {}).items():
                reader = reader.option(k, str(v))
            df = reader.load(srcdirs[name])
        else:
            raise ValueError("unknown source format %r" % fmt)
        wm = src.get("watermark")
        if wm:
            df = df.withWatermark(wm["column"], wm["delay"])
        dd = src.get("dedup")
        if dd:
            if dd.get("within_watermark"):
                df = df.dropDuplicatesWithinWatermark(dd["columns"])
            else:
                df = df.dropDuplicates(dd["columns"])
        df.createOrReplaceTempView(name)


def place_files(run, srcdirs, staging, clock):
    for srcname, files in (run.get("add_files") or {}).items():
        for f in files:
            content = "".join(line + "\n" for line in f["lines"])
            tmp = os.path.join(staging, "." + f["name"] + ".tmp")
            with open(tmp, "w", encoding="utf-8") as fh:
                fh.write(content)
            t = clock.next()
            os.utime(tmp, (t, t))
            dest = os.path.join(srcdirs[srcname], f["name"])
            if os.path.exists(dest):
                raise ValueError("file %s already exists in source %s" % (f["name"], srcname))
            os.rename(tmp, dest)


def set_scenario_conf(spark, conf):
    """spark.conf.set every scenario conf; returns what to restore: {key: previous or None}."""
    saved = {}
    for k, v in (conf or {}).items():
        saved[k] = spark.conf.get(k, None)
        spark.conf.set(k, str(v))
    return saved


def restore_conf(spark, saved):
    for k, v in saved.items():
        if v is None:
            spark.conf.unset(k)
        else:
            spark.conf.set(k, v)


def run_scenario(scenario, keep_tmp=False, log=None):
    """Returns (list of per-run results, info dict). A per-run result is
    {"expect": {...}} or {"expect_error": {...}}."""
    spark = get_spark()
    saved = set_scenario_conf(spark, scenario.get("conf"))
    try:
        return run_scenario_in_conf(spark, scenario, keep_tmp, log)
    finally:
        restore_conf(spark, saved)


def run_scenario_in_conf(spark, scenario, keep_tmp, log):
    for q in spark.streams.active:
        q.stop()
    for t in spark.catalog.listTables():
        if t.isTemporary:
            spark.catalog.dropTempView(t.name)
    spark.conf.set("spark.sql.shuffle.partitions", str(scenario.get("shuffle_partitions", 2)))

    root = tempfile.mkdtemp(prefix="oracle-%s-" % scenario["name"])
    srcdirs = {}
    for name, src in scenario["sources"].items():
        if src["format"] != "static":
            srcdirs[name] = os.path.join(root, "sources", name)
            os.makedirs(srcdirs[name])
    staging = os.path.join(root, "staging")
    os.makedirs(staging)
    ckpt = os.path.join(root, "checkpoint")
    clock = Clock()
    ordered = bool(scenario.get("ordered", False))
    results = []
    info = {"runs": [], "root": root}
    try:
        for ri, run in enumerate(scenario["runs"]):
            place_files(run, srcdirs, staging, clock)
            before = list_batches(os.path.join(ckpt, "commits"))
            sink_calls = []
            sink_errors = []

            def capture(df, batch_id):
                cols = df.columns
                if len(set(cols)) != len(cols):
                    raise ValueError("duplicate output column names: %s" % cols)
                rows = []
                try:
                    collected = df.collect()
                except Exception as e:  # noqa: BLE001
                    sink_errors.append(java_chain(e))
                    raise
                for r in collected:
                    rows.append({c: canon_value(v) for c, v in zip(cols, r)})
                sink_calls.append((batch_id, rows))

            t0 = time.time()
            q = None
            try:
                build_views(spark, scenario, srcdirs)
                df = spark.sql(run.get("query") or scenario["query"])
                q = (df.writeStream.outputMode(scenario["output_mode"])
                     .foreachBatch(capture)
                     .option("checkpointLocation", ckpt)
                     .trigger(availableNow=True)
                     .start())
                q.awaitTermination()
            except Exception as e:  # noqa: BLE001
                exp_err, chain = error_expectation(e, sink_errors[-1] if sink_errors else None)
                if q is not None:
                    try:
                        q.stop()
                    except Exception:
                        pass
                committed = sorted(list_batches(os.path.join(ckpt, "commits")) - before)
                results.append({"expect_error": exp_err})
                info["runs"].append({"seconds": round(time.time() - t0, 2), "error": True,
                                     "chain": chain, "committed_before_error": committed,
                                     "sink_calls_before_error": [b for b, _ in sink_calls]})
                if log:
                    log.write("== %s run %d ERROR\n" % (scenario["name"], ri))
                    for jcls, ec, msg in chain:
                        log.write("   %s [%s] %s\n" % (jcls, ec, msg.strip()[:2000]))
                    log.flush()
                continue
            elapsed = time.time() - t0
            progress = q.recentProgress
            committed = sorted(list_batches(os.path.join(ckpt, "commits")) - before)
            by_batch = {}
            idle = []
            for p in progress:
                executed = "addBatch" in (p.get("durationMs") or {})
                if executed:
                    by_batch[p["batchId"]] = p
                else:
                    idle.append(p["batchId"])
            calls = {}
            for b, rows in sink_calls:
                calls[b] = rows  # a retried batch: the last delivery wins
            batches = []
            notes = []
            for b in committed:
                p = by_batch.get(b)
                if p is None:
                    raise RuntimeError("no progress entry for committed batch %d" % b)
                rows = calls.get(b)
                if rows is None:
                    notes.append("batch %d: sink not called" % b)
                    rows = []
                if not ordered:
                    rows = sorted(rows, key=row_sort_key)
                entry = {"batch_id": b, "num_input_rows": p["numInputRows"], "rows": rows}
                wm = (p.get("eventTime") or {}).get("watermark")
                if wm is not None:
                    entry["watermark"] = canon_watermark(wm)
                ops = p.get("stateOperators") or []
                if ops:
                    entry["num_rows_dropped_by_watermark"] = sum(
                        o.get("numRowsDroppedByWatermark", 0) for o in ops)
                    entry["num_rows_total"] = sum(o.get("numRowsTotal", 0) for o in ops)
                batches.append(entry)
            extra_calls = sorted(set(calls) - set(committed))
            if extra_calls:
                notes.append("sink called for uncommitted batches %s" % extra_calls)
            if sorted(by_batch) != committed:
                notes.append("progress batches %s != committed %s" % (sorted(by_batch), committed))
            results.append({"expect": {"batches": batches}})
            info["runs"].append({
                "seconds": round(elapsed, 2), "committed": committed,
                "sink_called": sorted(calls), "idle_progress_batch_ids": idle,
                "no_data_batches": [b["batch_id"] for b in batches if b["num_input_rows"] == 0],
                "notes": notes,
            })
    finally:
        for q in spark.streams.active:
            try:
                q.stop()
            except Exception:
                pass
        if not keep_tmp:
            shutil.rmtree(root, ignore_errors=True)
    return results, info


# --------------------------------------------------------------------------------------------
# JSON output (readable, stable)
# --------------------------------------------------------------------------------------------

def dumps(v, indent=0, width=100):
    compact = json.dumps(v, ensure_ascii=False, separators=(", ", ": "))
    if len(compact) + indent <= width or not isinstance(v, (dict, list)) or not v:
        return compact
    pad = " " * (indent + 2)
    if isinstance(v, dict):
        items = ["%s%s: %s" % (pad, json.dumps(k, ensure_ascii=False),
                               dumps(x, indent + 2, width)) for k, x in v.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    items = [pad + dumps(x, indent + 2, width) for x in v]
    return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"


def apply_results(scenario, results):
    for run, res in zip(scenario["runs"], results):
        run.pop("expect", None)
        old = run.pop("expect_error", None) or {}
        res = json.loads(json.dumps(res))
        if "expect_error" in res and "kind" in old:
            # keep the hand-added kind first, as the README asks it to be written
            res["expect_error"] = dict([("kind", old["kind"])] + list(res["expect_error"].items()))
        run.update(res)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--check-determinism", action="store_true",
                    help="run every scenario twice and compare")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--keep-tmp", action="store_true")
    ap.add_argument("--timings", help="append per-scenario timing/info JSON lines here")
    ap.add_argument("--log", help="append error chains here")
    ap.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                    help="extra Spark conf (for experiments; the recorded files use none)")
    ap.add_argument("--dump-results", metavar="FILE",
                    help="write {name: per-run results} as JSON here (e.g. with --no-write)")
    args = ap.parse_args()
    for kv in args.conf:
        k, v = kv.split("=", 1)
        EXTRA_CONF[k] = v
    dumped = {}

    log = open(args.log, "a") if args.log else None
    failures = 0
    for path in args.files:
        with open(path, encoding="utf-8") as fh:
            scenario = json.load(fh)
        name = scenario.get("name", os.path.basename(path))
        t0 = time.time()
        try:
            res1, info1 = run_scenario(scenario, args.keep_tmp, log)
            same = None
            if args.check_determinism:
                res2, info2 = run_scenario(scenario, args.keep_tmp, None)
                same = res1 == res2
        except Exception:
            failures += 1
            print("FAIL %s\n%s" % (name, traceback.format_exc()), flush=True)
            continue
        dt = time.time() - t0
        summary = []
        for i, (r, inf) in enumerate(zip(res1, info1["runs"])):
            if "expect_error" in r:
                summary.append("run%d: ERROR %s" % (i, r["expect_error"]))
            else:
                summary.append("run%d: batches=%s nodata=%s sink=%s idle=%s %s" % (
                    i, inf["committed"], inf["no_data_batches"], inf["sink_called"],
                    inf["idle_progress_batch_ids"], "; ".join(inf["notes"])))
        print("OK   %s (%.1fs)%s\n     %s" % (
            name, dt, "" if same is None else (" deterministic" if same else " NONDETERMINISTIC"),
            "\n     ".join(summary)), flush=True)
        if args.timings:
            with open(args.timings, "a") as tf:
                tf.write(json.dumps({"name": name, "file": path,
                                     "seconds_per_execution": round(dt / (2 if same is not None else 1), 2),
                                     "deterministic": same,
                                     "runs": [{k: v for k, v in x.items() if k != "chain"}
                                              for x in info1["runs"]]}) + "\n")
        dumped[name] = res1
        if same is False:
            failures += 1
            print("     first:  %s\n     second: %s" % (json.dumps(res1), json.dumps(res2)))
            continue
        if not args.no_write:
            apply_results(scenario, res1)
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(dumps(scenario) + "\n")
    if args.dump_results:
        with open(args.dump_results, "w") as fh:
            json.dump(dumped, fh, indent=1)
    if log:
        log.close()
    if SPARK is not None:
        SPARK.stop()
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
