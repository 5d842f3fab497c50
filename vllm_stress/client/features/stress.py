"""Stress: requests the client cancels on purpose, bursty (gamma) open-loop arrivals and microbursts, and the step
ramp's early stop when the server broke (docs/guides/stress.md)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from vllm_stress.client.pacing import parse_microburst

if TYPE_CHECKING:
    from vllm_stress.client.features import OptionGroup


def add_arguments(group: OptionGroup) -> None:
    group.add_argument(
        "--cancel-share",
        type=float,
        default=0.0,
        help="Share of requests the client cancels (0 to 1): it closes the connection at --cancel-after; such a row "
        "says Cancelled, counted apart from successes and failures (0: none)",
    )
    group.add_argument(
        "--cancel-after",
        default="20tokens",
        help="With --cancel-share: where a drawn request is cut, a delay from its send (2s, 500ms) or its N-th "
        "output chunk (20tokens: tokens with a stream interval of 1; a delay for non-streamed requests)",
    )
    group.add_argument(
        "--burstiness",
        type=float,
        default=1.0,
        help="With --arrival-rate: the gaps between arrivals are gamma-distributed with this shape, as vllm bench "
        "serve's --burstiness (1: Poisson; below 1 burstier, above 1 more even; coefficient of variation 1/sqrt(B))",
    )
    group.add_argument(
        "--microburst",
        default="",
        help="N,M_MS,K_S: N requests sent within M ms every K s, the first K s after the schedule's start, on top "
        "of --arrival-rate or alone, each worker its share of each burst; -u must cover N and the rate's requests in "
        "flight (e.g. 32,100,10)",
    )
    group.add_argument(
        "--arrival-seed",
        type=int,
        default=None,
        help="Seed of the arrival and cancellation draws (each worker adds its index); default: the process id",
    )
    group.add_argument(
        "--profile-at",
        type=int,
        default=None,
        metavar="USERS",
        help="Profile the server when the step ramp's level of USERS begins its hold: the master POSTs vLLM's "
        "/start_profile, and /stop_profile --profile-seconds later (vllm serve needs --profiler-config)",
    )
    group.add_argument(
        "--profile-when-running",
        type=int,
        default=None,
        metavar="N",
        help="Profile the server once a scrape of its /metrics shows N requests running (vllm:num_requests_running), "
        "as --profile-at does",
    )
    group.add_argument(
        "--profile-seconds",
        type=float,
        default=10.0,
        help="With --profile-at or --profile-when-running: how long the profile lasts (seconds)",
    )
    group.add_argument(
        "--stop-on",
        default="",
        help="The step ramp ends after a level that trips a rule, keeping the levels that ran: NAME[_pNN]>LIMIT "
        "(the --slo grammar: ttft, tpot, e2e, a bare NAME its p99), errors>SHARE (failed share, 5%% or 0.05), "
        "saturated (the server's queue grew through the hold); comma-separated, e.g. 'errors>5%%,ttft_p99>30s'",
    )


def run_json(options: argparse.Namespace) -> dict[str, Any] | None:
    """run.json's ``stress``: the arrivals' rate, burstiness and microbursts and the cancellations asked, None when a
    run asked neither bursts nor cancellations."""
    burstiness, share = getattr(options, "burstiness", 1.0), getattr(options, "cancel_share", 0.0)
    burst = parse_microburst(getattr(options, "microburst", ""))
    if burstiness == 1.0 and not share and not burst:
        return None
    return {
        "arrival_rate": options.arrival_rate or None,
        "burstiness": burstiness,
        "microburst": burst.run_json() if burst else None,
        "cancel_share": share,
        "cancel_after": options.cancel_after if share else None,
    }
