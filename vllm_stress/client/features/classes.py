"""Traffic classes: shares of the users with their own lengths, priority, model, API and SLO."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vllm_stress.client.features import OptionGroup


def add_arguments(group: OptionGroup) -> None:
    group.add_argument(
        "--traffic-class",
        action="append",
        default=[],
        help="A traffic class, NAME:weight=W,input=N,output=N,priority=P,model=M,api=API,slo=SLO (repeatable, or "
        "several separated by ';'): its share of the users, lengths, vLLM priority, model or adapter, API (chat, "
        "completions, embeddings, rerank, score: a mixed fleet from the chat user) and SLO "
        "(docs/guides/traffic-classes.md)",
    )
