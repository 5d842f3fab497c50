"""The report's plots as matplotlib figures, from a synthetic run with a known saturation point: axes with units,
titles that fit, a shaded hold per level (hatched when not steady) and the saturation point marked."""

import pandas as pd
import pytest
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from vllm_stress.analysis.figures import plots
from vllm_stress.analysis.figures.pareto import pareto_figure
from vllm_stress.analysis.io.load import load_run
from vllm_stress.analysis.io.synthetic import closed_loop_rows, write_run
from vllm_stress.analysis.report.pipeline import summarise_runs

# Closed loops of 512-token answers: 10 s requests up to 20 users (512, 1,024 tok/s), then e2e grows with the users
# (the server is full: 1,024 tok/s). The 80-user hold is one request lifetime long: not steady.
E2E_S = {10: 10.0, 20: 10.0, 40: 20.0, 80: 40.0}
HOLD_S = {10: 200.0, 20: 200.0, 40: 200.0, 80: 40.0}
RUN_NAME = "run-2026-11-25T07-00-00-a-rather-long-scenario-name-that-a-title-cannot-hold-whole"


@pytest.fixture(scope="module")
def summary(tmp_path_factory):
    """The config's summary and its timelines, as the report builds them."""
    t, rows, levels = 1.7e9, [], []
    for users, e2e in E2E_S.items():
        hold_start, hold_end = t + 10, t + 10 + HOLD_S[users]
        rows.append(closed_loop_rows(users, t, hold_end, e2e))
        levels.append((users, t, hold_start, hold_end))
        t = hold_end
    folder = write_run(tmp_path_factory.mktemp("runs") / RUN_NAME, pd.concat(rows), levels)
    config, timelines, _ = summarise_runs("demo", [load_run(folder)], None, None, {}, 10.0)
    return {"demo": config}, {"demo": timelines}


@pytest.fixture(scope="module")
def figures(summary):
    return plots.figures(*summary)


def fits(figure: Figure, ax: Axes) -> bool:
    """The axes' title, drawn, lies inside the figure."""
    box = ax.title.get_window_extent(figure.canvas.get_renderer())
    return 0 <= box.x0 and box.x1 <= figure.bbox.width


def test_the_synthetic_run_saturates_at_20_users_and_80_is_not_steady(summary):
    config = summary[0]["demo"]
    assert config["saturation_users"] == 20
    assert [level["steady"] for level in config["levels"]] == [True, True, True, False]


def test_every_plot_has_units_on_both_axes_and_a_title_that_fits(figures):
    assert list(figures) == [
        "Throughput vs concurrency",
        "p99 latency vs concurrency",
        "Throughput-latency curve",
        "Timeline: demo",
    ]
    for figure, _ in figures.values():
        figure.canvas.draw()
        for ax in figure.axes:
            twins = ax.get_shared_x_axes().get_siblings(ax)  # a right-hand y axis shares its twin's x label
            assert ax.get_ylabel() and any(twin.get_xlabel() for twin in twins), ax
            if ax.get_title():
                assert len(ax.get_title()) <= plots.TITLE_CHARS and fits(figure, ax), ax.get_title()
    throughput = figures["Throughput vs concurrency"][0].axes
    assert [(ax.get_xlabel(), ax.get_ylabel()) for ax in throughput] == [
        ("concurrency (users)", "output tok/s"),
        ("concurrency (users)", "total (input+output) tok/s"),
    ]
    assert figures["Throughput-latency curve"][0].axes[0].get_ylabel() == "p99 e2e latency (s)"


def test_the_timeline_has_a_short_title_time_since_start_and_a_span_per_hold(figures):
    ax, tokens = figures["Timeline: demo"][0].axes
    assert ax.get_title() == plots.short(f"demo: {RUN_NAME}") and "/" not in ax.get_title()
    assert ax.get_xlabel() == "seconds since the first request (2023-11-14 22:13:20 UTC)"
    assert (ax.get_ylabel(), tokens.get_ylabel()) == ("requests in flight", "output tok/s (10 s mean)")
    holds = [patch.get_gid() for patch in ax.patches]
    assert holds == ["hold-steady", "hold-steady", "hold-steady", "hold-unsteady"]
    assert [text.get_text() for text in ax.texts] == ["10 users", "20 users", "40 users", "80 users"]


def test_the_saturation_point_is_marked_where_throughput_and_latency_are_drawn(figures):
    for title in ("Throughput vs concurrency", "p99 latency vs concurrency"):
        for ax in figures[title][0].axes:
            (line,) = [line for line in ax.lines if line.get_gid() == "saturation"]
            assert list(line.get_xdata()) == [20, 20] and line.get_label() == "saturation: 20 users"
    (star,) = [line for line in figures["Throughput-latency curve"][0].axes[0].lines if line.get_gid() == "saturation"]
    assert list(star.get_xdata()) == pytest.approx([1024.0], rel=0.02)


def test_short_keeps_both_ends():
    assert plots.short("abcdefghij", 7) == "abc…hij" and plots.short("abc", 7) == "abc"


def test_a_reasoning_models_run_plots_its_time_to_first_answer_beside_its_ttft(summary):
    configs, timelines = summary
    levels = [
        level | {"reasoning_share": 0.5, "ttfa_p99_s": 2 * level["ttft_p99_s"]} for level in configs["demo"]["levels"]
    ]
    figure, name = plots.figures({"demo": configs["demo"] | {"levels": levels}}, timelines)[
        "Time to first answer vs concurrency"
    ]
    ttft_ax, ttfa_ax = figure.axes
    assert name == "answer.png" and ttfa_ax.get_ylabel() == "p99 time to first answer (s)"
    assert list(ttfa_ax.lines[0].get_ydata()) == [2 * y for y in ttft_ax.lines[0].get_ydata()]


DEMO_LEVELS = [10, 50, 100, 200, 500, 1000]
TWELVE_LEVELS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 768, 1024]
BATCH = 128  # the made-up server's batch cap: the throughput is flat and the TPOT the same from 128 users on


def step_ramp(levels: list[int]) -> plots.Timeline:
    """A run's timeline of a step ramp whose holds grow with the users as the demo's do (4 s at 1 user, 66 s at
    1,024), every fifth not steady."""
    t, windows = 0.0, []
    for index, users in enumerate(levels):
        hold = 2.0 + 2.0 * users**0.5
        windows.append({"start": t + 2, "end": t + 2 + hold, "users": users, "steady": index % 5 != 4})
        t += 2 + hold
    seconds = pd.DataFrame({"second": range(int(t) + 1)})
    seconds["in_flight"] = seconds["second"] * levels[-1] / t
    seconds["failed"], seconds["output_tokens"] = 0.0, 100.0
    seconds["unix_time"] = 1.7e9 + seconds["second"]
    frame = pd.DataFrame(windows)
    frame[["start", "end"]] += 1.7e9
    return ("run", seconds, frame)


def capped(levels: list[int]) -> list[dict]:
    """Levels of a server that streams 1,000 tok/s from BATCH users on, its p99 e2e growing with the queue."""
    return [
        {
            "users": users,
            "steady": True,
            "output_tokens_per_s": 1000.0 * min(users, BATCH) / BATCH,
            "e2e_p99_s": 1.0 + max(0, users - BATCH) / 50,
        }
        for users in levels
    ]


def visible_labels(figure: Figure) -> list:
    """The texts drawn inside the figure's axes (titles, ticks and legends are not in ``ax.texts``), drawn."""
    figure.canvas.draw()
    return [text for ax in figure.axes for text in ax.texts if text.get_visible()]


def assert_apart(figure: Figure) -> None:
    renderer = figure.canvas.get_renderer()
    labels = visible_labels(figure)
    boxes = [(text.get_text(), text.get_window_extent(renderer)) for text in labels]
    for index, (name, box) in enumerate(boxes):
        for other, other_box in boxes[index + 1 :]:
            assert not box.overlaps(other_box), f"{name!r} is written over {other!r}"


@pytest.mark.parametrize("levels", [DEMO_LEVELS, TWELVE_LEVELS], ids=["6 levels", "12 levels"])
def test_no_label_is_written_over_another(levels):
    timeline = plots.timeline_figure("demo", [step_ramp(levels)])
    assert_apart(timeline)
    assert [text.get_text() for text in visible_labels(timeline)] == [f"{users} users" for users in levels]
    tradeoff = plots.tradeoff_figure({"demo": capped(levels)}, {"demo": BATCH})
    assert_apart(tradeoff)
    named = [users for text in visible_labels(tradeoff) for users in text.get_text().removesuffix(" users").split("/")]
    assert sorted(map(int, named)) == levels  # each level named once, on its point or beside the ones it meets


def test_pareto_points_that_coincide_share_one_label():
    levels = capped(DEMO_LEVELS)
    points = pd.DataFrame(
        {
            "label": "demo",
            "users": DEMO_LEVELS,
            "per_user": [20.0, 20.0, 19.0, 8.0, 8.0, 8.0],  # the same TPOT from 200 users on: the batch is full
            "per_gpu": [level["output_tokens_per_s"] / 8 for level in levels],
            "front": True,
            "gpus_given": True,
        }
    )
    figure = pareto_figure(points, None)
    assert_apart(figure)
    assert [text.get_text() for text in visible_labels(figure)] == ["10", "50", "100", "200/500/1000"]
