"""The report's figures (matplotlib): per-config plots against users, timelines, the Pareto front and scaling."""

import os

FIGURES_ENV = "VLLM_STRESS_FIGURES"  # "0": every report this process writes leaves its figures out
NO_FIGURES_NOTE = (
    f"Not drawn: this report was written with --no-figures (or {FIGURES_ENV}=0); summary.json and the tables above "
    "hold every figure's numbers."
)


def figures_wanted(asked: bool | None) -> bool:
    """Whether a report draws its figures: as ``asked``, else as FIGURES_ENV says (drawn unless it is "0")."""
    return asked if asked is not None else os.environ.get(FIGURES_ENV, "1") != "0"
