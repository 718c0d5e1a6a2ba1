"""Every conformance scenario (shared/conformance/scenarios and crates/conformance/scenarios)
through PySpark over Spark Connect: sources with the DataFrame API (readStream / withWatermark /
dropDuplicates(WithinWatermark) / spark.read for static tables / temp views), the query with
`spark.sql`, every batch captured by a Python foreachBatch, compared with what Spark recorded.
Two modes: `plain`, and `restart` (the server is SIGKILLed and restarted after every run; the
next run resumes on the same checkpoint; for the scenarios of more than one run). The scenarios Sluice's Rust runner fails
(crates/conformance/expected-failures.txt) are xfail(strict) against Sluice, so a fix shows.

Plus hand-written DataFrame-API versions of a few scenarios' queries (groupBy(window).count(),
filter/select, a stream-static join, dedup), checked against the same recordings.
"""
import os

import pytest
from conftest import ENGINE
from pyspark.sql import functions as F

import scenarios
import sys
from pyspark import cloudpickle

# foreachBatch functions and listeners defined here are pickled with their code: the
# server's Python worker cannot import this test module.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

FILES = scenarios.scenario_files()
XFAIL = scenarios.expected_failures() if ENGINE == "sluice" else {}


def _params():
    out = []
    for path in FILES:
        sc = scenarios.load(path)
        # a restart between runs: only where there is a next run to resume
        for mode in ("plain", "restart") if len(sc["runs"]) > 1 else ("plain",):
            marks = []
            if sc["name"] in XFAIL:
                marks.append(pytest.mark.xfail(
                    strict=True, reason="expected-failures.txt: " + XFAIL[sc["name"]]))
            out.append(pytest.param(path, mode, id="%s-%s" % (sc["name"], mode), marks=marks))
    return out


def test_both_corpora_are_found():
    names = [scenarios.load(p)["name"] for p in FILES]
    assert len(names) == len(set(names)), "scenario names must be unique across both corpora"
    public = [p for p in FILES if os.path.abspath(p).startswith(os.path.abspath(scenarios.PUBLIC_DIR))]
    assert len(public) >= 29, "the public corpus (../shared/conformance/scenarios) was not found"
    assert len(FILES) - len(public) >= 45, "Sluice's own corpus was not found"
    unknown = set(scenarios.expected_failures()) - set(names)
    assert not unknown, "expected-failures.txt names unknown scenarios: %s" % sorted(unknown)


@pytest.mark.parametrize("path,mode", _params())
def test_scenario(sessions, workdir, path, mode):
    sc = scenarios.load(path)
    diff = scenarios.run_scenario(sessions, sc, workdir, mode == "restart", ENGINE)
    assert diff is None, "%s [%s]: %s" % (sc["name"], mode, diff)


# ----------------------------------------------------------------------------------------------
# DataFrame-API versions of some scenarios' SQL queries, same recordings
# ----------------------------------------------------------------------------------------------

def _public(area, name):
    return os.path.join(scenarios.PUBLIC_DIR, area, name + ".json")


def window_count(spark):
    # SELECT window.start AS start, window.end AS end, count(*) AS count FROM events
    # GROUP BY window(ts, '5 minutes')
    return (spark.table("events").groupBy(F.window("ts", "5 minutes")).count()
            .select(F.col("window.start").alias("start"), F.col("window.end").alias("end"),
                    "count"))


def filter_project(spark):
    # SELECT id, user, amount * 2 AS doubled FROM events WHERE amount > 0
    return (spark.table("events").filter(F.col("amount") > 0)
            .select("id", "user", (F.col("amount") * 2).alias("doubled")))


def expressions(spark):
    # stateless_filter_project_expressions' query, in pyspark.sql.functions
    amount, qty, user = F.col("amount"), F.col("qty"), F.col("user")
    return (spark.table("events")
            .where((qty > 0) & (F.col("category") != "test"))
            .select("id", F.upper(user).alias("user_uc"),
                    F.concat(user, F.lit(":"), "category").alias("tag"),
                    F.length(user).alias("name_len"), F.substring(user, 1, 3).alias("prefix"),
                    (amount * qty).alias("total"), F.round(amount, 2).alias("amount_r2"),
                    F.abs(amount).alias("amount_abs"), (qty % 3).alias("qty_mod3"),
                    F.when(amount >= 100, "high").when(amount >= 20, "mid")
                    .when(amount.isNull(), "none").otherwise("low").alias("band"),
                    amount.cast("int").alias("amount_int"),
                    qty.cast("string").alias("qty_str")))


def stream_static_left_join(spark):
    # SELECT e.user, e.amount, u.country, coalesce(u.tier, 'none') AS tier
    # FROM events e LEFT OUTER JOIN users u ON e.user = u.user
    e, u = spark.table("events").alias("e"), spark.table("users").alias("u")
    return (e.join(u, F.col("e.user") == F.col("u.user"), "left_outer")
            .select(F.col("e.user").alias("user"), F.col("e.amount").alias("amount"),
                    F.col("u.country").alias("country"),
                    F.coalesce(F.col("u.tier"), F.lit("none")).alias("tier")))


def dedup_select(spark):
    # SELECT id, ts, user FROM events (the view is already deduplicated)
    return spark.table("events").select("id", "ts", "user")


def session_count(spark):
    # SELECT user, session_window.start AS start, session_window.end AS end, count(*) AS events
    # FROM events GROUP BY user, session_window(ts, '5 minutes')
    return (spark.table("events").groupBy("user", F.session_window("ts", "5 minutes"))
            .agg(F.count("*").alias("events"))
            .select("user", F.col("session_window.start").alias("start"),
                    F.col("session_window.end").alias("end"), "events"))


def stream_stream_inner(spark):
    i, c = spark.table("impressions").alias("i"), spark.table("clicks").alias("c")
    cond = ((F.col("i.ad_id") == F.col("c.ad_id"))
            & (F.col("c.click_time") >= F.col("i.imp_time"))
            & (F.col("c.click_time") <= F.col("i.imp_time") + F.expr("INTERVAL 15 MINUTES")))
    return i.join(c, cond).select(F.col("i.ad_id").alias("ad_id"), "i.imp_time",
                                  "c.click_time", "c.user")


DATAFRAME_VERSIONS = {
    "window_count_update_late_drop": ("aggregate", window_count),
    "window_count_append_late_drop": ("aggregate", window_count),
    "window_count_complete_late": ("aggregate", window_count),
    "session_window_append": ("aggregate", session_count),
    "max_files_per_trigger_split": ("stateless", filter_project),
    "stateless_filter_project_expressions": ("stateless", expressions),
    "stream_static_left_outer_join": ("join", stream_static_left_join),
    "stream_stream_inner_join_time_range": ("join", stream_stream_inner),
    "dedup_with_watermark": ("dedup", dedup_select),
    "dedup_within_watermark": ("dedup", dedup_select),
}


@pytest.mark.streaming
@pytest.mark.parametrize("name", sorted(DATAFRAME_VERSIONS))
def test_dataframe_api_version(sessions, workdir, name):
    area, make = DATAFRAME_VERSIONS[name]
    sc = scenarios.load(_public(area, name))
    assert not any(r.get("query") for r in sc["runs"]), "a run changes the query"
    diff = scenarios.run_scenario(sessions, sc, workdir, False, ENGINE, make_frame=make)
    assert diff is None, "%s [dataframe api]: %s" % (name, diff)
