"""Correctness canaries: graded questions among the load, their answers compared across levels."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vllm_stress.client.canary import DEFAULT_CANARY_MIN, DEFAULT_CANARY_SHARE
from vllm_stress.client.features import PATH

if TYPE_CHECKING:
    from vllm_stress.client.features import OptionGroup


def add_arguments(group: OptionGroup) -> None:
    group.add_argument(
        "--canary-share",
        type=float,
        default=DEFAULT_CANARY_SHARE,
        help="Correctness canaries: this share of each level's requests are fixed prompts of a graded set "
        "at temperature 0 with a seed, their answers kept in answers.csv and compared across levels (0: none)",
    )
    group.add_argument(
        "--canary-min",
        type=int,
        default=DEFAULT_CANARY_MIN,
        help="With --canary-share: at least this many canaries per level (and load-generating process); the set's "
        "first N questions are the prompts asked, in turn",
    )
    group.add_argument(
        "--canary-file",
        default="",
        form=PATH,
        help="With --canary-share: a JSONL file of MMLU- or GSM8K-shaped questions "
        "(default: the shipped scenarios/data/synthetic-mc.jsonl)",
    )
    group.add_argument(
        "--canaries-in-figures",
        action="store_true",
        default=False,
        help="Count the canaries in the live figures like any request (their Locust entry is the request's own, "
        "not '<name> canary'); run.json says so, and the analysis then counts them in every figure too",
    )
