"""Prompts from a dataset file (or a Hugging Face Hub dataset) instead of random ones."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vllm_stress.client.features import PATH

if TYPE_CHECKING:
    from vllm_stress.client.features import OptionGroup

DEFAULT_NUM_PROMPTS = 1000  # as vllm bench serve's --num-prompts: what a worker sizes with /tokenize at its start


def add_arguments(group: OptionGroup) -> None:
    group.add_argument(
        "--dataset",
        default="",
        form=PATH,
        help='JSONL or Parquet file of prompts ({"prompt": ...} or {"messages": ...} records), or a ShareGPT '
        "JSON, JSONL or Parquet file (a conversations column); or hf:ORG/NAME[@REVISION][/PATH], a Hugging Face "
        "Hub dataset's Parquet (else JSONL) files, its train split's when it has splits, downloaded at the test start "
        "into the Hugging Face cache (HF_TOKEN, HF_HOME, HF_HUB_OFFLINE)",
    )
    group.add_argument(
        "--num-prompts",
        type=int,
        default=DEFAULT_NUM_PROMPTS,
        help="With --dataset: prompts drawn from the file (seeded: the same on every worker), each "
        "sized with the server's /tokenize when a worker starts (0: all of them)",
    )
