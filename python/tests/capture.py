"""The foreachBatch functions the tests hand to `writeStream.foreachBatch`, and the canonical
values of shared/conformance/FORMAT.md ("Canonical values", plus the nested values of
crates/conformance/scenarios/README.md).

A foreachBatch function runs in the SERVER's Python worker, not in the test process, so these
functions write what they saw to a JSON-lines file the test then reads. conftest.py registers
this module with cloudpickle *by value*, so the worker does not need to import it.
"""
import datetime as _dt
import decimal
import json


def canon_ts(dt):
    """UTC `YYYY-MM-DDTHH:MM:SS[.ffffff]`, trailing zeros of the fraction trimmed."""
    s = dt.strftime("%Y-%m-%dT%H:%M:%S")
    if dt.microsecond:
        s += ("." + "%06d" % dt.microsecond).rstrip("0")
    return s


def canon_value(v, dtype=None):
    """A collected value as the recorder writes it. `dtype` is the Spark type when known: a
    TIMESTAMP arrives from PySpark as a naive datetime in the *local* time zone (Spark Connect's
    conversion), so it is converted to UTC; a TIMESTAMP_NTZ is taken as it is."""
    tname = type(dtype).__name__ if dtype is not None else ""
    if v is None:
        return None
    if isinstance(v, bool):
        return v
    if isinstance(v, _dt.datetime):
        if v.tzinfo is not None:
            v = v.astimezone(_dt.timezone.utc).replace(tzinfo=None)
        elif tname == "TimestampType":
            v = v.astimezone(_dt.timezone.utc).replace(tzinfo=None)
        return canon_ts(v)
    if isinstance(v, _dt.date):
        return v.isoformat()
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        if v != v:  # as the Rust runner renders a non-finite float (Rust's f64 text)
            return "NaN"
        if v in (float("inf"), float("-inf")):
            return "inf" if v > 0 else "-inf"
        return v
    if isinstance(v, decimal.Decimal):
        return int(v) if v == v.to_integral_value() else float(v)
    if isinstance(v, str):
        return v
    if isinstance(v, (bytes, bytearray)):
        return v.decode("utf-8", "replace")
    if isinstance(v, _dt.timedelta):
        return str(v)
    if hasattr(v, "__fields__"):  # a Row: a struct, an object in field order
        ftypes = {}
        if tname == "StructType":
            ftypes = {f.name: f.dataType for f in dtype.fields}
        return {f: canon_value(x, ftypes.get(f)) for f, x in zip(v.__fields__, v)}
    if isinstance(v, dict):  # a map: keys as the canonical key's text
        kt = getattr(dtype, "keyType", None)
        vt = getattr(dtype, "valueType", None)
        out = {}
        for k, x in v.items():
            ck = canon_value(k, kt)
            key = ck if isinstance(ck, str) else json.dumps(ck, separators=(",", ":"))
            out[key] = canon_value(x, vt)
        return out
    if isinstance(v, (list, tuple)):
        et = getattr(dtype, "elementType", None)
        return [canon_value(x, et) for x in v]
    return repr(v)


def rows_of(df):
    """Collects a DataFrame into canonical rows ({column: value})."""
    fields = df.schema.fields
    return [
        {f.name: canon_value(x, f.dataType) for f, x in zip(fields, r)}
        for r in df.collect()
    ]


def error_text(e):
    """An exception as text the test can classify: type, error class and message."""
    cond = None
    for attr in ("getCondition", "getErrorClass"):
        try:
            cond = getattr(e, attr)()
            if cond:
                break
        except Exception:  # noqa: BLE001
            pass
    return {"type": type(e).__name__, "class": cond, "message": str(e)}


def make_capture(path):
    """A foreachBatch function appending `{"batch_id", "rows"}` (or `{"batch_id", "error"}`
    when collecting the batch failed, re-raising) per call to the JSON-lines file `path`."""

    def capture(df, batch_id):
        try:
            rows = rows_of(df)
        except Exception as e:  # noqa: BLE001
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps({"batch_id": batch_id, "error": error_text(e)}) + "\n")
            raise
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"batch_id": batch_id, "rows": rows}) + "\n")

    return capture


def read_capture(path):
    """The calls recorded by a capture function, in call order."""
    try:
        with open(path, encoding="utf-8") as fh:
            return [json.loads(line) for line in fh if line.strip()]
    except FileNotFoundError:
        return []


def make_print(path):
    """A `print` that also appends what it prints to `path`: given to the seed documents' code
    as its `print`, so what their foreachBatch functions print in the server's worker lands in
    the same transcript as what the client prints."""

    def tee_print(*args, sep=" ", end="\n", file=None, flush=False):
        import builtins

        builtins.print(*args, sep=sep, end=end, file=file, flush=flush)
        if file is None:
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(sep.join(str(a) for a in args) + end)

    return tee_print
