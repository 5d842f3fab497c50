"""PNG plots of a summary and of run timelines, drawn with matplotlib's Agg canvas (no pyplot, no display).

Each plot is built as a Figure first (``*_figure``), then saved: the tests read the figures' axes, titles and
marks rather than pixels."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.text import Annotation
from matplotlib.transforms import Bbox
from matplotlib.typing import ColorType

from vllm_stress.analysis.measures import Level
from vllm_stress.analysis.summary import ConfigSummary
from vllm_stress.core.numbers import LOG_USERS_AXIS_RATIO

SMOOTHING_S = 10  # rolling mean of the timeline's output tok/s (shorter for runs under 300 s)
TITLE_CHARS = 60  # what one 6.5-inch panel's title holds at matplotlib's 12 pt title font
LEGEND_CHARS = 40  # a config's label in a legend
USERS_LABEL = "concurrency (users)"
Timeline = tuple[str, pd.DataFrame, pd.DataFrame]  # a run: its folder, levels.timeline per second, its level windows
Saturation = Mapping[str, int | None]  # config label -> its saturation point (users), None without one
LABEL_GAP_PX = 2.0  # two labels closer than this on the canvas count as overlapping
MERGE_PX = 6.0  # points this close on the canvas share one label ("200/500/1000")
LABEL_FONT = 7
Offset = tuple[float, float, Literal["left", "center", "right"]]  # from the anchor, in points; the alignment
# Where a point's label may go, tried in order: (x, y) offset in points from the point, horizontal alignment
POINT_OFFSETS: list[Offset] = [
    (dx, dy, "left" if dx > 0 else "right") for dy in (4, -11, 14, -21, 24, -31) for dx in (4, -4)
]
# Where a hold's label may go: rows down from the top of the timeline's axes
HOLD_LABEL_ROWS: list[Offset] = [(0, -3 - 9 * row, "center") for row in range(5)]


def new_figure(columns: int = 1, rows: int = 1, height: float = 4.0) -> tuple[Figure, list[Axes]]:
    """An Agg-backed figure and its axes as a flat list."""
    figure = Figure(figsize=(6.5 * columns, height * rows), layout="tight")
    FigureCanvasAgg(figure)
    axes = figure.subplots(rows, columns, squeeze=False)
    return figure, [ax for row in axes for ax in row]


def save(figure: Figure, path: Path) -> Path:
    """Write ``figure`` as a PNG at ``path``."""
    figure.savefig(path, dpi=100)
    return path


def short(text: str, limit: int = TITLE_CHARS) -> str:
    """``text`` cut to ``limit`` characters, its middle replaced by an ellipsis (a run folder's name keeps its
    start and its timestamp)."""
    if len(text) <= limit:
        return text
    head = (limit - 1) // 2
    return text[:head] + "…" + text[len(text) - (limit - 1 - head) :]


def level_frame(levels: list[Level]) -> pd.DataFrame:
    """A config's levels as a DataFrame sorted by users, missing values (None in the summary) as NaN."""
    frame = pd.DataFrame(levels).sort_values("users")
    numeric = frame.columns.drop(["unstable", "bound", "steady", "steady_reason"], errors="ignore")
    frame[numeric] = frame[numeric].apply(pd.to_numeric)
    return frame


def plot_against_users(
    levels_by_label: Mapping[str, list[Level]],
    fields: list[tuple[str, str]],
    path: Path,
    saturation: Saturation | None = None,
) -> Path:
    """One panel per (field, label with its unit): each config's mean against users (see against_users_figure)."""
    return save(against_users_figure(levels_by_label, fields, saturation or {}), path)


def against_users_figure(
    levels_by_label: Mapping[str, list[Level]], fields: list[tuple[str, str]], saturation: Saturation
) -> Figure:
    """One panel per (field, label with its unit): each config's mean against users, with 95 % CI error bars for
    repeats, unsteady levels circled and each config's saturation point as a dotted vertical line."""
    figure, axes = new_figure(columns=len(fields))
    users = pd.concat([level_frame(records)["users"] for records in levels_by_label.values()])
    for ax, (field, label) in zip(axes, fields, strict=True):
        for config, records in levels_by_label.items():
            levels = level_frame(records)
            errors = levels.get(f"{field}_ci95")
            line = ax.errorbar(
                levels["users"], levels[field], yerr=errors, marker="o", capsize=3, label=short(config, LEGEND_CHARS)
            )
            mark_unsteady(ax, levels, "users", field)
            mark_saturation(ax, saturation.get(config), line.lines[0].get_color())
        if users.max() >= LOG_USERS_AXIS_RATIO * users.min():
            ax.set_xscale("log")
        ax.set(title=short(f"{label} vs concurrency"), xlabel=USERS_LABEL, ylabel=label)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    return figure


def mark_saturation(ax: Axes, users: int | None, color: ColorType) -> None:
    """A dotted vertical line at a config's saturation point (none without one)."""
    if users is not None:
        ax.axvline(
            users, color=color, linestyle=":", linewidth=1.5, label=f"saturation: {users} users", gid="saturation"
        )


def mark_unsteady(ax: Axes, levels: pd.DataFrame, x: str, y: str) -> None:
    """Circle in red the levels that were not steady (they are not the peak or the saturation point)."""
    unsteady = levels[~levels["steady"].astype(bool)]
    if not unsteady.empty:
        ax.scatter(
            unsteady[x],
            unsteady[y],
            s=160,
            facecolors="none",
            edgecolors="tab:red",
            linewidths=1.5,
            label="not steady",
            zorder=3,
        )


def place_labels(figure: Figure, labels: Sequence[Annotation], offsets: Sequence[Offset]) -> None:
    """Put each of ``labels`` (annotations in offset points) at the first of ``offsets`` where, as drawn, it lies
    inside its axes and LABEL_GAP_PX clear of every label placed before it; hide it where none is (the report's
    tables, or the plot's lines, say what it would). A draw without rasterizing first lays the figure out as it will
    be saved."""
    figure.draw_without_rendering()
    renderer = figure.canvas.get_renderer()  # type: ignore[attr-defined]  # Agg's
    placed: list[Bbox] = []
    for label in labels:
        for dx, dy, ha in offsets:
            label.xyann = (dx, dy)
            label.set_horizontalalignment(ha)
            box = label.get_window_extent(renderer).padded(LABEL_GAP_PX / 2)
            if label.axes is not None and inside(box, label.axes.bbox) and not any(map(box.overlaps, placed)):
                placed.append(box)
                break
        else:
            label.set_visible(False)


def inside(box: Bbox, area: Bbox) -> bool:
    """Whether ``box`` lies wholly in ``area`` (both in display coordinates)."""
    return bool(area.x0 <= box.x0 and box.x1 <= area.x1 and area.y0 <= box.y0 and box.y1 <= area.y1)


def label_points(
    figure: Figure, ax: Axes, points: Sequence[tuple[float, float, str]], unit: str = ""
) -> list[Annotation]:
    """Label each (x, y, text) point of ``ax`` beside it with its text and ``unit``, every point MERGE_PX from the
    first of a group on the canvas under one label joining their texts with "/" (levels that coincide: "200/500/1000
    users"), each label clear of the others (place_labels); call once every mark of the figure is drawn (the axes'
    limits are final)."""
    figure.draw_without_rendering()
    groups: list[tuple[float, float, list[str]]] = []
    for x, y, text in points:
        if math.isnan(x) or math.isnan(y):
            continue
        at = ax.transData.transform((x, y))
        near = (group for group in groups if math.dist(ax.transData.transform(group[:2]), at) <= MERGE_PX)
        if (group := next(near, None)) is not None:
            group[2].append(text)
        else:
            groups.append((x, y, [text]))
    labels = [
        ax.annotate("/".join(texts) + unit, (x, y), xytext=(4, 4), textcoords="offset points", fontsize=LABEL_FONT)
        for x, y, texts in groups
    ]
    place_labels(figure, labels, POINT_OFFSETS)
    return labels


def tradeoff_figure(levels_by_label: Mapping[str, list[Level]], saturation: Saturation) -> Figure:
    """p99 e2e latency against output tok/s, each point labelled with its concurrency, each config's saturation point
    starred."""
    figure, (ax,) = new_figure()
    points = []
    for label, records in levels_by_label.items():
        levels = level_frame(records)
        (line,) = ax.plot(
            levels["output_tokens_per_s"], levels["e2e_p99_s"], marker="o", label=short(label, LEGEND_CHARS)
        )
        mark_unsteady(ax, levels, "output_tokens_per_s", "e2e_p99_s")
        points += [
            (level["output_tokens_per_s"], level["e2e_p99_s"], str(int(level["users"])))
            for _, level in levels.iterrows()
        ]
        star_saturation(ax, levels, saturation.get(label), line.get_color())
    ax.set(title="Throughput-latency curve", xlabel="output tok/s", ylabel="p99 e2e latency (s)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    label_points(figure, ax, points, " users")
    return figure


def star_saturation(ax: Axes, levels: pd.DataFrame, users: int | None, color: ColorType) -> None:
    """A star on the saturation level's point of the throughput-latency curve (none without one)."""
    point = levels[levels["users"] == users]
    if not point.empty:
        ax.plot(
            point["output_tokens_per_s"],
            point["e2e_p99_s"],
            marker="*",
            markersize=16,
            linestyle="none",
            color=color,
            label=f"saturation: {users} users",
            gid="saturation",
            zorder=4,
        )


def timeline_figure(label: str, timelines: list[Timeline]) -> Figure:
    """Per run of a config: requests in flight, failures and output tok/s per second since its first request, each
    level's hold shaded (hatched red when not steady) with its target users dashed."""
    figure, axes = new_figure(rows=len(timelines), height=3.3)
    labels = []
    for ax, (run_dir, seconds, windows) in zip(axes, timelines, strict=True):
        ax.plot(seconds["second"], seconds["in_flight"], color="tab:blue", linewidth=1)
        if seconds["failed"].any():
            ax.plot(seconds["second"], seconds["failed"], color="tab:red", linewidth=0.8)
        ax.set_ylabel("requests in flight", color="tab:blue")
        plot_tokens(ax, seconds)
        origin = seconds["unix_time"].iloc[0]
        for _, window in windows.iterrows():
            start, end = window["start"] - origin, window["end"] - origin
            labels.append(shade_hold(ax, start, end, int(window["users"]), window["steady"]))
        started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(origin))
        ax.set(title=run_title(label, run_dir), xlabel=f"seconds since the first request ({started})")
        legend = timeline_legend(bool(seconds["failed"].any()))
        ax.legend(handles=legend, fontsize="x-small", loc="upper center", bbox_to_anchor=(0.5, -0.3), ncols=4)
    place_labels(figure, labels, HOLD_LABEL_ROWS)
    return figure


def run_title(label: str, run_dir: str) -> str:
    """A timeline's title: the config's label and its run folder's name (once when they are the same), shortened."""
    name = Path(run_dir).name
    return short(name if label == name else f"{label}: {name}")


def plot_tokens(ax: Axes, seconds: pd.DataFrame) -> None:
    """The smoothed output tok/s on a right-hand axis of ``ax``."""
    tokens = ax.twinx()
    smoothing_s = max(1, min(SMOOTHING_S, len(seconds) // 30))
    smoothed = seconds["output_tokens"].rolling(smoothing_s, min_periods=1, center=True).mean()
    tokens.plot(seconds["second"], smoothed, color="tab:orange", linewidth=1)
    tokens.set_ylabel(f"output tok/s ({smoothing_s} s mean)", color="tab:orange")
    tokens.set_ylim(bottom=0)


def shade_hold(ax: Axes, start: float, end: float, users: int, steady: bool) -> Annotation:
    """A level's hold [start, end) in seconds since the first request: shaded blue when steady, hatched red when not,
    its target users dashed and written at the top (the label returned, for place_labels to put in a free row)."""
    if steady:
        ax.axvspan(start, end, alpha=0.1, color="tab:blue", gid="hold-steady")
    else:
        ax.axvspan(start, end, alpha=0.15, facecolor="tab:red", hatch="//", edgecolor="tab:red", gid="hold-unsteady")
    ax.hlines(users, start, end, colors="tab:blue", linestyles="--")
    return ax.annotate(
        f"{users} users",
        ((start + end) / 2, 1.0),
        xycoords=ax.get_xaxis_transform(),
        xytext=HOLD_LABEL_ROWS[0][:2],
        textcoords="offset points",
        ha="center",
        va="top",
        fontsize=LABEL_FONT,
    )


def timeline_legend(failed: bool) -> list[Line2D | Patch]:
    """The timeline's legend: its lines and the two kinds of hold."""
    handles: list[Line2D | Patch] = [
        Line2D([], [], color="tab:blue", linewidth=1, label="in flight"),
        Line2D([], [], color="tab:blue", linestyle="--", label="target users"),
        Line2D([], [], color="tab:orange", linewidth=1, label="output tok/s"),
        Patch(facecolor="tab:blue", alpha=0.1, label="steady hold"),
        Patch(facecolor="tab:red", alpha=0.15, hatch="//", edgecolor="tab:red", label="hold not steady"),
    ]
    if failed:
        handles.append(Line2D([], [], color="tab:red", linewidth=0.8, label="failed/s"))
    return handles


THROUGHPUT_FIELDS = [("output_tokens_per_s", "output tok/s"), ("total_tokens_per_s", "total (input+output) tok/s")]
LATENCY_FIELDS = [("e2e_p99_s", "p99 e2e latency (s)"), ("ttft_p99_s", "p99 TTFT (s)")]
# a reasoning model's runs: the first answer token beside the first token (docs/concepts/metrics.md, TTFA)
ANSWER_FIELDS = [("ttft_p99_s", "p99 TTFT (s)"), ("ttfa_p99_s", "p99 time to first answer (s)")]


def figures(
    configs: Mapping[str, ConfigSummary], timelines: Mapping[str, list[Timeline]]
) -> dict[str, tuple[Figure, str]]:
    """Every plot of a summary's configs and their runs' timelines: {title: (figure, file name)}."""
    levels = {label: config["levels"] for label, config in configs.items()}
    saturation = {label: config["saturation_users"] for label, config in configs.items()}
    plots = {
        "Throughput vs concurrency": (against_users_figure(levels, THROUGHPUT_FIELDS, saturation), "throughput.png"),
        "p99 latency vs concurrency": (against_users_figure(levels, LATENCY_FIELDS, saturation), "latency.png"),
        "Throughput-latency curve": (tradeoff_figure(levels, saturation), "tradeoff.png"),
    }
    if any(level.get("reasoning_share") is not None for records in levels.values() for level in records):
        plots["Time to first answer vs concurrency"] = (
            against_users_figure(levels, ANSWER_FIELDS, saturation),
            "answer.png",
        )
    for index, (label, runs) in enumerate(timelines.items()):
        plots[f"Timeline: {label}"] = (timeline_figure(label, runs), f"timeline_{index + 1}.png")
    return plots


def write_plots(
    configs: Mapping[str, ConfigSummary], timelines: Mapping[str, list[Timeline]], out: Path
) -> dict[str, Path]:
    """All plots of a summary's configs and their runs' timelines into ``out``; returns {title: path}."""
    return {title: save(figure, out / name) for title, (figure, name) in figures(configs, timelines).items()}
