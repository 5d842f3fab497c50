"""The report's plots of the format-5 fixture drawn in-process, the label placement's layout draws rasterized
(``canvas.draw``) and not (``Figure.draw_without_rendering``), interleaved, six rounds each: the CPU seconds of
``write_plots``. From the checkout's root: ``python -m benchmarks.plot_draws``."""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from matplotlib.figure import Figure

from vllm_stress.analysis.figures import plots
from vllm_stress.analysis.report import pipeline

FIXTURE = Path(__file__).parent.parent / "tests" / "fixtures" / "formats" / "v5" / "run"
ROUNDS = 6


def plotted_inputs(out: Path) -> tuple:
    """The configs and timelines the analysis of FIXTURE hands to write_plots."""
    seen: list[tuple] = []

    def keep(*args: object) -> dict[str, Path]:
        seen.append(args)
        return plots.write_plots(*args)  # type: ignore[arg-type]

    pipeline.write_plots = keep  # type: ignore[assignment]
    pipeline.analyse([str(FIXTURE)], out)
    return seen[0]


def main() -> None:
    layout_only = Figure.draw_without_rendering
    rasterized = {"rasterized draws": lambda figure: figure.canvas.draw(), "layout-only draws": layout_only}
    with tempfile.TemporaryDirectory() as folder:
        configs, timelines, out = plotted_inputs(Path(folder))
        seconds: dict[str, list[float]] = {name: [] for name in rasterized}
        for _ in range(ROUNDS):
            for name, draw in rasterized.items():
                Figure.draw_without_rendering = draw  # type: ignore[method-assign]
                start = time.process_time()
                plots.write_plots(configs, timelines, out)
                seconds[name].append(time.process_time() - start)
    for name, values in seconds.items():
        print(f"{name}: median {statistics.median(values):.3f} CPU-s, {min(values):.3f}-{max(values):.3f}")


if __name__ == "__main__":
    main()
