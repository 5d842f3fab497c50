"""Multi-turn sessions, and how routers are told which requests belong together."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from vllm_stress.client.affinity import PRESETS
from vllm_stress.client.features import PATH

if TYPE_CHECKING:
    from vllm_stress.client.features import OptionGroup

DEFAULT_TURNS = 4
DEFAULT_TURN_TOKENS = 128
DEFAULT_THINK_TIME_S = 1.0
THINK_DISTRIBUTIONS = ("constant", "exponential", "uniform")
DEFAULT_SESSION_HEADER = "X-Session-Id"


def add_arguments(group: OptionGroup) -> None:
    group.add_argument(
        "--turns",
        type=int,
        default=DEFAULT_TURNS,
        help="Session user: turns of one conversation (a ShareGPT conversation: at most its human turns)",
    )
    group.add_argument(
        "--turn-tokens",
        type=int,
        default=DEFAULT_TURN_TOKENS,
        help="Session user: new user-message tokens of each turn after the first (the first is "
        "--input-tokens, template included)",
    )
    group.add_argument(
        "--think-time",
        type=float,
        default=DEFAULT_THINK_TIME_S,
        help="Session user: mean seconds between an answer and the next turn",
    )
    group.add_argument(
        "--think-dist",
        choices=THINK_DISTRIBUTIONS,
        default="exponential",
        help="Session user: think time distribution (uniform: between 0 and twice the mean)",
    )
    group.add_argument(
        "--session-header",
        default=DEFAULT_SESSION_HEADER,
        help="Session user: header carrying the session id, for routers that pin sessions; with --prefix-tokens "
        "every user: the prompt's prefix group ('' : none)",
    )
    group.add_argument(
        "--router-preset",
        choices=("", *PRESETS),
        default="",
        help="Pin sessions (and prefix groups) the way this router reads them, instead of --session-header: "
        "production-stack x-user-id, llm-d its llm-d-session cookie sent back, dynamo x-dynamo-session-id, "
        "sglang X-SMG-Routing-Key (docs/guides/fleets.md)",
    )
    group.add_argument(
        "--session-seed",
        type=int,
        default=None,
        help="Session user: seed of the think times and prompt words (default: a new one per run, so "
        "that a rerun does not find the previous run's conversations in the prefix cache)",
    )
    group.add_argument(
        "--session-trace",
        default="",
        form=PATH,
        help="Session user: replay the recorded sessions of this session-trace JSONL file (.gz: gzip; session_id, "
        "input_length, output_length, hash_ids, delay or timestamp ms a line; or Bailian's chat_id lines), of "
        "Weka agent traces (a JSON trace, one a line, or a folder of them; subagents fanned out and joined), of "
        "OpenTelemetry GenAI traces exported as OTLP/JSON (each trace a session, its chat spans the turns, child "
        "invoke_agent spans its subagents), of TraceLab rounds (Claude Code / Codex) or of Dynamo request traces "
        "(a .jsonl or .jsonl.gz file, a folder of them or a segment prefix), told by their content, one after "
        "another, in place of --turns, --input-tokens and --think-time (docs/guides/sessions-and-traces.md)",
    )
    group.add_argument(
        "--session-start",
        default="",
        metavar="MIN,MAX",
        help="With --session-trace: each user's first session begins at a turn drawn from this share of its turns "
        "(e.g. 0.25,0.75, as AIPerf's trajectory start ratios), so a level's conversations are at mixed depths from "
        "the start; that turn is sent whole, its history in its prompt (and first in the prefix cache: "
        "--session-primer), and the session counts as joined, in no session latency (default: every session from "
        "its first turn)",
    )
    group.add_argument(
        "--session-primer",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="With --session-start: before a user joins a session past its first turn, send the prompt of the last "
        "turn it skips with max_tokens 1 (its row named session-primer, counted by the accounting, in no figure), so "
        "that the session's history is in the prefix cache as a fleet met mid-way has it; --no-session-primer: the "
        "joined turn starts cold",
    )
    group.add_argument(
        "--idle-gap-cap",
        type=float,
        default=None,
        help="With --session-trace: wait at most this many seconds of a recorded gap between turns (default: the "
        "whole gap)",
    )
