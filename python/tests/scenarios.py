"""Runs the conformance scenarios (shared/conformance/FORMAT.md, with the extensions of
crates/conformance/scenarios/README.md) through PySpark over Spark Connect, and compares with
the recorded expectations by the rules of Sluice's Rust runner (crates/conformance/src/runner.rs,
values.rs, deviations.rs): rows as multisets (in order with `"ordered": true`), numbers with a
relative tolerance of 1e-9, numInputRows matching the recorded count or the count without
pushdown, the watermark (1970-01-01T00:00:00 when progress has none), the sums of
numRowsDroppedByWatermark and numRowsTotal over the state operators, `sluice_intended` checked
instead of the recording (when the server is Sluice), `expect_error` kinds mapped from error
classes in one place (`error_kind`).
"""
import json
import os
import re

from capture import make_capture, read_capture
from conftest import progress_dict

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PUBLIC_DIR = os.environ.get("SLUICE_CONFORMANCE_DIR") or os.path.join(
    REPO, "..", "shared", "conformance", "scenarios")
OWN_DIR = os.path.join(REPO, "crates", "conformance", "scenarios")
EXPECTED_FAILURES = os.path.join(REPO, "crates", "conformance", "expected-failures.txt")

FLOAT_TOLERANCE = 1e-9
# deviations.rs: scenarios whose num_rows_total is not compared (Spark's range partitioner
# runs the stateful operator twice for an ORDER BY after a complete-mode aggregation).
SKIP_NUM_ROWS_TOTAL = {"groupby_key_complete_ordered"}
RUN_TIMEOUT_SECONDS = float(os.environ.get("SLUICE_RUN_TIMEOUT", "180"))


def scenario_files():
    out = []
    for d in (PUBLIC_DIR, OWN_DIR):
        for root, _dirs, files in os.walk(d):
            out.extend(os.path.join(root, f) for f in files if f.endswith(".json"))
    return sorted(out)


def load(path):
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def expected_failures():
    """{name: reason} of the scenarios Sluice fails plainly (lines `name [variant] reason` are
    crash-matrix variants of the Rust runner, not ours)."""
    out = {}
    with open(EXPECTED_FAILURES, encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split(None, 1)
            rest = parts[1].strip() if len(parts) > 1 else ""
            if rest.startswith("["):
                continue
            out[parts[0]] = rest
    return out


# ----------------------------------------------------------------------------------------------
# comparison (values.rs)
# ----------------------------------------------------------------------------------------------

def values_equal(a, b):
    if isinstance(a, dict) and isinstance(b, dict):
        return len(a) == len(b) and all(k in b and values_equal(v, b[k]) for k, v in a.items())
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(values_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b or a == b and type(a) is type(b)
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        if isinstance(a, int) and isinstance(b, int):
            return a == b
        return a == b or abs(a - b) <= FLOAT_TOLERANCE * max(abs(a), abs(b))
    return a == b


def rows_equal(a, b):
    return len(a) == len(b) and all(k in b and values_equal(v, b[k]) for k, v in a.items())


def show(r):
    return json.dumps(r, sort_keys=True)


def compare_rows(expected, actual, ordered):
    """None when equal, else the first difference (as values.rs::compare_rows)."""
    if ordered:
        for i, (e, a) in enumerate(zip(expected, actual)):
            if not rows_equal(e, a):
                return "row %d: expected %s got %s" % (i, show(e), show(a))
        if len(expected) != len(actual):
            return "expected %d rows, got %d" % (len(expected), len(actual))
        return None
    remaining = list(actual)
    missing = []
    for e in expected:
        for i, a in enumerate(remaining):
            if rows_equal(e, a):
                del remaining[i]
                break
        else:
            missing.append(e)
    if not missing and not remaining:
        return None
    msg = "expected %d rows, got %d" % (len(expected), len(actual))
    if missing:
        msg += "; missing %s" % show(missing[0])
    if remaining:
        msg += "; unexpected %s" % show(remaining[0])
    return msg


def canonical_watermark(w):
    """`2026-09-15T12:00:00.000Z` -> `2026-09-15T12:00:00`."""
    w = w.rstrip("Z")
    base, _, frac = w.partition(".")
    frac = frac.rstrip("0")
    return base + ("." + frac if frac else "")


# ----------------------------------------------------------------------------------------------
# errors
# ----------------------------------------------------------------------------------------------

WRAPPER_CLASSES = {"STREAM_FAILED", "FOREACH_BATCH_USER_FUNCTION_ERROR", "PYTHON_EXCEPTION"}


def error_classes(exc=None, texts=()):
    """Every error class an exception (and error texts from inside the foreachBatch worker)
    names: its own condition, then every `[CLASS]` in its message, wrappers left out."""
    found = []
    if exc is not None:
        for attr in ("getCondition", "getErrorClass"):
            try:
                c = getattr(exc, attr)()
            except Exception:  # noqa: BLE001
                c = None
            if c:
                found.append(c)
                break
        texts = [str(exc)] + list(texts)
    for t in texts:
        found.extend(re.findall(r"\[([A-Z][A-Z0-9_]*(?:\.[A-Z][A-Z0-9_]*)*)\]", t or ""))
    return [c for c in dict.fromkeys(found) if c not in WRAPPER_CLASSES]


def error_kind(classes, text):
    """FORMAT.md's kinds from error classes — in this one place (runner.rs::error_kind). Spark's
    own server names some of these failures without a class; its message then decides."""
    for c in classes:
        if c.startswith("STREAMING_OUTPUT_MODE"):
            return "output_mode"
        if c.startswith("STATE_SCHEMA") or c.startswith("STREAMING_STATE_SCHEMA") or \
                c.startswith("STATE_STORE_KEY_SCHEMA") or c.startswith("STATE_STORE_VALUE_SCHEMA"):
            return "state_schema"
        if c == "SLUICE_NOT_SUPPORTED_YET":
            return "not_supported_yet"
    low = (text or "").lower()
    if "output mode not supported" in low:
        return "output_mode"
    if "state schema" in low or "stateschemanotcompatible" in low:
        return "state_schema"
    return "other"


def check_error(exc, sink_errors, want):
    texts = [e.get("message", "") for e in sink_errors]
    classes = error_classes(exc, texts)
    text = "\n".join([str(exc)] + texts)
    if want["kind"] == "error_class":
        cls = want.get("class")
        if not cls:
            return "expect_error has kind error_class but no recorded class"
        if cls in classes:
            return None
        return "expected an error of class %s, got %s: %s" % (cls, classes, first_line(text))
    kind = error_kind(classes, text)
    if kind == want["kind"]:
        return None
    return "expected a %s error, got %s (%s): %s" % (want["kind"], kind, classes, first_line(text))


def first_line(text, n=400):
    t = " ".join((text or "").split())
    return t[:n]


# ----------------------------------------------------------------------------------------------
# running
# ----------------------------------------------------------------------------------------------

class Workspace:
    def __init__(self, root):
        self.root = root
        # well in the past, 10 s apart per file, so that maxFileAge never hides a file
        import time
        self.next_mtime = int(time.time()) - 100000
        self.checkpoint = os.path.join(root, "checkpoint")
        os.makedirs(os.path.join(root, "staging"), exist_ok=True)

    def source_dir(self, name):
        d = os.path.join(self.root, "input", name)
        os.makedirs(d, exist_ok=True)
        return d

    def add_file(self, source, name, lines):
        content = "".join(line + "\n" for line in lines)
        tmp = os.path.join(self.root, "staging", "." + name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(content)
        self.next_mtime += 10
        os.utime(tmp, (self.next_mtime, self.next_mtime))
        dest = os.path.join(self.source_dir(source), name)
        if os.path.exists(dest):
            raise ValueError("file %s already exists in source %s" % (name, source))
        os.rename(tmp, dest)

    def commits(self):
        d = os.path.join(self.checkpoint, "commits")
        if not os.path.isdir(d):
            return set()
        return {int(n) for n in os.listdir(d) if n.isdigit()}


def build_views(spark, scenario, ws, run_index):
    for name, src in scenario["sources"].items():
        fmt = src["format"]
        schema = src.get("schema") or "value STRING"
        if fmt == "static":
            rows = src.get("rows", [])
            if rows:
                path = os.path.join(ws.root, "static", name, "rows.json")
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w", encoding="utf-8") as fh:
                    fh.write("\n".join(json.dumps(r) for r in rows) + "\n")
                df = spark.read.schema(schema).json(path)
            else:
                df = spark.createDataFrame([], schema)
        elif fmt in ("json", "csv", "text"):
            reader = spark.readStream.format(fmt).schema(schema)
            if fmt == "csv":
                reader = reader.option("header", "true")
            opts = {k: str(v) for k, v in (src.get("options") or {}).items()}
            if opts:
                reader = reader.options(**opts)
            df = reader.load(ws.source_dir(name))
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


def progress_dicts(q):
    return [progress_dict(p) for p in q.recentProgress]


def execute_run(spark, scenario, run, ws, run_index, make_frame=None):
    """Starts the run's query (availableNow, foreachBatch capture) and waits for it. Returns
    (exception or None, sink calls, progress dicts, new commit ids)."""
    before = ws.commits()
    cap = os.path.join(ws.root, "capture-run%d-%d.jsonl" % (run_index, len(os.listdir(ws.root))))
    q = None
    exc = None
    progress = []
    try:
        for k, v in (scenario.get("conf") or {}).items():
            spark.conf.set(k, str(v))
        spark.conf.set("spark.sql.shuffle.partitions", str(scenario.get("shuffle_partitions", 2)))
        build_views(spark, scenario, ws, run_index)
        if make_frame is not None:
            df = make_frame(spark)
        else:
            df = spark.sql(run.get("query") or scenario["query"])
        q = (df.writeStream.outputMode(scenario["output_mode"])
             .foreachBatch(make_capture(cap))
             .option("checkpointLocation", ws.checkpoint)
             .trigger(availableNow=True)
             .start())
        finished = q.awaitTermination(RUN_TIMEOUT_SECONDS)
        if not finished:
            q.stop()
            raise TimeoutError("the run's availableNow query did not stop within %ds"
                               % RUN_TIMEOUT_SECONDS)
        # awaitTermination returns normally on some clients when the query failed
        e = q.exception()
        if e is not None:
            raise e
    except Exception as e:  # noqa: BLE001
        exc = e
    if q is not None:
        try:
            progress = progress_dicts(q)
        except Exception:  # noqa: BLE001
            progress = []
        if exc is not None:
            try:
                q.stop()
            except Exception:  # noqa: BLE001
                pass
    calls = read_capture(cap)
    committed = sorted(ws.commits() - before)
    return exc, calls, progress, committed


def num_input_rows(p):
    """A progress's numInputRows; summed over its sources when the top-level figure is absent
    (Spark 4.2's Connect server leaves it out of the progress JSON; Spark 3.5 and Sluice have
    it, and test_seeds checks that it is there)."""
    if p.get("numInputRows") is not None:
        return p["numInputRows"]
    if "numInputRows" in p or not p.get("sources"):
        return p.get("numInputRows")
    return sum(s.get("numInputRows", 0) for s in p["sources"])


def compare_batches(scenario, expect, calls, progress, committed):
    """None when the run matches `expect`, else the first difference (runner.rs)."""
    seen = {}
    for c in calls:
        if "rows" in c:
            seen[c["batch_id"]] = c["rows"]  # a replayed batch: the last delivery wins
    ids = sorted(seen)
    want_ids = [b["batch_id"] for b in expect["batches"]]
    if ids != want_ids:
        return "expected batches %s, got %s (committed %s)" % (want_ids, ids, committed)
    if committed != ids:
        return "foreachBatch saw batches %s but the checkpoint committed %s" % (ids, committed)
    executed = {}
    for p in progress:
        if "addBatch" in (p.get("durationMs") or {}) or p["batchId"] not in executed:
            executed[p["batchId"]] = p
    for want in expect["batches"]:
        bid = want["batch_id"]
        p = executed.get(bid)
        diff = compare_rows(want.get("rows", []), seen[bid], scenario.get("ordered", False))
        if diff:
            return "batch %d: %s" % (bid, diff)
        n = want.get("num_input_rows")
        if n is not None:
            if p is None:
                return "batch %d: no progress" % bid
            got = num_input_rows(p)
            alt = want.get("num_input_rows_without_pushdown")
            if got != n and (alt is None or got != alt):
                return "batch %d: numInputRows %s, expected %d%s" % (
                    bid, got, n, "" if alt is None else " (or %d without pushdown)" % alt)
        wm = want.get("watermark")
        if wm is not None:
            got_wm = ((p or {}).get("eventTime") or {}).get("watermark")
            got_wm = canonical_watermark(got_wm) if got_wm else "1970-01-01T00:00:00"
            if got_wm != wm:
                return "batch %d: watermark %s, expected %s" % (bid, got_wm, wm)
        ops = (p or {}).get("stateOperators") or []
        n = want.get("num_rows_dropped_by_watermark")
        if n is not None:
            got = sum(o.get("numRowsDroppedByWatermark", 0) for o in ops)
            if got != n:
                return "batch %d: numRowsDroppedByWatermark %d, expected %d" % (bid, got, n)
        n = want.get("num_rows_total")
        if n is not None and scenario["name"] not in SKIP_NUM_ROWS_TOTAL:
            got = sum(o.get("numRowsTotal", 0) for o in ops)
            if got != n:
                return "batch %d: numRowsTotal %d, expected %d" % (bid, got, n)
    return None


def run_scenario(sessions, scenario, root, restart, engine, make_frame=None):
    """Runs every run of the scenario on one checkpoint; None when all match, else the first
    difference as `run N: ...`. With `restart`, the server is SIGKILLed and restarted after
    every run but the last (the next run resumes on the checkpoint)."""
    ws = Workspace(root)
    for i, run in enumerate(scenario["runs"]):
        for source, files in (run.get("add_files") or {}).items():
            for f in files:
                ws.add_file(source, f["name"], f["lines"])
        expect, expect_error = run.get("expect"), run.get("expect_error")
        intended = run.get("sluice_intended")
        if intended and engine == "sluice":
            expect, expect_error = intended.get("expect"), intended.get("expect_error")
        exc, calls, progress, committed = execute_run(
            sessions.current, scenario, run, ws, i, make_frame)
        sink_errors = [c["error"] for c in calls if "error" in c]
        if exc is not None and expect_error is not None:
            diff = check_error(exc, sink_errors, expect_error)
        elif exc is not None:
            text = " ".join("\n".join([str(exc)] + [e.get("message", "") for e in sink_errors])
                            .split())
            # the head says where, the tail (a traceback's last line) says what
            if len(text) > 1200:
                text = text[:400] + " ... " + text[-800:]
            diff = "query failed: %s: %s" % (type(exc).__name__, text)
        elif expect_error is not None:
            diff = "expected a %s error (%s), but the run succeeded" % (
                expect_error["kind"], expect_error.get("contains", ""))
        elif expect is None:
            diff = "the run has neither expect nor expect_error"
        else:
            diff = compare_batches(scenario, expect, calls, progress, committed)
        if diff:
            return "run %d: %s" % (i + 1, diff)
        if restart and i + 1 < len(scenario["runs"]):
            sessions.restart_server()
    return None
