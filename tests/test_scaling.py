"""The scaling table (vllm_stress.analysis.features.replica_set) on a replica set made by hand: one replica, a queue
growing at 10 s, a second replica up at 14 s and serving from 15 s, then leaving at 30 s; and its plot."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from vllm_stress.analysis.features import features
from vllm_stress.analysis.features.replica_set import scaling, scaling_blocks
from vllm_stress.analysis.figures.scalingplot import scaling_figure
from vllm_stress.analysis.report.render import Heading, Table

T0 = 1_800_000_000.0


def replica_set() -> pd.DataFrame:
    """Looks every second for 40 s at replicas a (always up) and b (up from 14 s to 29 s, running from 15 s)."""
    rows = []
    for second in range(41):
        waiting_a = 6 if 10 <= second < 16 else 1 if second == 5 else 0  # a blip at 5 s: not the queue's start
        rows.append((T0 + second, "a:8000", 1, 4, waiting_a))
        up_b = 14 <= second < 30
        running_b = 3 if 15 <= second < 30 else 0
        rows.append((T0 + second, "b:8000", int(up_b), running_b if up_b else math.nan, 0 if up_b else math.nan))
    return pd.DataFrame(rows, columns=["time", "replica", "up", "running", "waiting"])


def requests() -> pd.DataFrame:
    """A request sent every half second; those sent from 11 s to 12 s failed, one at 13 s was aborted."""
    starts = [T0 + i / 2 for i in range(80)]
    ok = [not (11 <= s - T0 < 12) for s in starts]
    error = ["HTTP 503" if not good else "" for good in ok]
    frame = pd.DataFrame({"start_time": starts, "ok": ok, "error": error, "ttft_s": [0.1] * 80})
    frame.loc[frame["start_time"] == T0 + 13, ["ok", "error"]] = [False, "Aborted"]
    frame.loc[frame["start_time"] == T0 + 12, "ttft_s"] = 2.0
    return frame


def test_a_scale_up_lag_runs_from_the_queues_growth_to_the_new_replica_serving():
    result = scaling("run", replica_set(), requests(), gpus=2, gpu_hour_price=3.0)
    [up] = result["scale_ups"]
    assert up["replica"] == "b:8000"
    assert (up["queue_grew_s"], up["up_s"], up["serving_s"], up["lag_s"]) == (10, 14, 15, 5)
    assert up["requests"] == 10  # sent in [10 s, 15 s), every half second
    assert up["failed"] == 2  # 11 s and 11.5 s; the aborted one at 13 s is no failure
    assert up["waiting_peak"] == 6
    # its 7 successful requests: six at 0.1 s, one at 2 s; p99 by linear interpolation at rank 0.99 x 6 = 5.94
    assert up["ttft_p99_s"] == pytest.approx(0.1 + 0.94 * (2.0 - 0.1))
    assert result["changes"] == [[0, 1, 0], [14, 2, 6], [30, 1, 0]]
    assert result["leaves"] == 1
    hours = (40 + 16) / 3600  # a: 40 s, b: 16 s (14 s to 30 s)
    assert result["replica_hours"] == pytest.approx(hours)
    assert result["cost_usd"] == pytest.approx(hours * 2 * 3.0)


def test_without_a_price_no_cost_and_a_replica_never_serving_has_no_lag():
    table = replica_set()
    table.loc[table["replica"] == "b:8000", "running"] = 0
    result = scaling("run", table, requests(), gpus=None, gpu_hour_price=None)
    assert result["cost_usd"] is None
    assert math.isnan(result["scale_ups"][0]["lag_s"])


def test_the_report_shows_the_changes_and_the_scale_ups_and_the_plot_the_lag():
    result = scaling("run", replica_set(), requests(), gpus=1, gpu_hour_price=2.0)
    tables = [block for block in scaling_blocks("cfg", [result]) if isinstance(block, Table)]
    assert [row[1] for row in tables[0].rows] == ["1", "2", "1"]
    assert tables[1].rows[0][:5] == ["b:8000", "10.00 s", "14.00 s", "15.00 s", "5.00 s"]
    top, bottom = scaling_figure("cfg", [result]).axes
    assert list(top.lines[0].get_ydata()[[0, 14, 30]]) == [1, 2, 1]
    [shaded] = top.patches
    assert shaded.get_x() == 10 and shaded.get_width() == 5


def test_a_replica_up_before_any_look_saw_a_queue_has_no_lag():
    """The autoscaler saw a queue between two looks: the scale-up is listed, its lag unknown, no request counted."""
    table = replica_set()
    table.loc[table["replica"] == "a:8000", "waiting"] = 0
    [up] = scaling("run", table, requests(), gpus=None, gpu_hour_price=None)["scale_ups"]
    assert math.isnan(up["queue_grew_s"]) and math.isnan(up["lag_s"]) and up["requests"] == 0
    assert up["up_s"] == 14


def test_a_fleet_that_never_scaled_shows_no_scaling_section_nor_plot(tmp_path):
    steady = replica_set()
    steady = steady[steady["replica"] == "a:8000"]  # one replica, up throughout: a P/D or fixed fleet's replicas.csv
    scaled = {"replica_set": [scaling("run", replica_set(), requests(), gpus=1, gpu_hour_price=None)]}
    fixed = {"replica_set": [scaling("run", steady, requests(), gpus=1, gpu_hour_price=None)]}
    [feature] = [feature for feature in features() if feature.capability.name == "scaling"]
    assert fixed["replica_set"][0]["scale_ups"] == [] and not feature.used(fixed)
    assert feature.blocks("cfg", fixed, {"cfg": fixed}) == [] and feature.figures({"cfg": fixed}, tmp_path) == {}
    assert feature.used(scaled) and feature.blocks("cfg", scaled, {"cfg": scaled})[0] == Heading("Scaling: cfg")
    assert list(feature.figures({"cfg": scaled}, tmp_path)) == ["Replicas over time: cfg"]
