"""Virtual-time closed loop: the engine run as fast as the CPU allows, with no sleeping and no HTTP, as
``vllm bench serve --max-concurrency`` would load it (docs/concepts/simulator.md, section 13)."""

from __future__ import annotations

import dataclasses
import statistics

import numpy as np

from vllm_stress.core.metrics import percentile

from ..model.profiles import Profile
from .core import Engine
from .sequence import Sequence


@dataclasses.dataclass(frozen=True)
class ClosedLoopResult:
    concurrency: int
    completed: int  # requests finished in the whole run
    output_tokens_per_s: float  # of the steady window's requests, at Little's law's rate (concurrency / mean e2e)
    total_tokens_per_s: float  # input + output tokens per second
    ttft_mean: float  # seconds, arrival -> first token (includes queueing)
    ttft_p50: float
    tpot_p50: float  # seconds per output token after the first
    e2e_mean: float  # seconds, arrival -> last token (the search's dense-sweep test holds the search to it)
    max_waiting: int  # largest waiting-queue length seen after a step
    max_running: int
    preemptions: int


def _window(finished: list[tuple[int, Sequence]], concurrency: int, issued_limit: int | None) -> list[Sequence]:
    upper = issued_limit - concurrency if issued_limit is not None else None
    steady = [seq for number, seq in finished if number >= concurrency and (upper is None or number < upper)]
    return steady or [seq for _, seq in finished]


def closed_loop(
    profile: Profile,
    concurrency: int,
    input_tokens: int,
    output_tokens: int,
    requests: int | None = None,
    duration_s: float | None = None,
    seed: int = 0,
) -> ClosedLoopResult:
    """Run ``concurrency`` closed-loop clients against a fresh engine of ``profile``.

    Each request has ``input_tokens`` prompt tokens and generates exactly ``output_tokens`` (ignore_eos). The run
    ends when ``requests`` requests were issued and finished, or when the engine clock passes ``duration_s``
    (requests still in flight are dropped); with neither, ``requests = 4 * concurrency``.
    """
    if requests is None and duration_s is None:
        requests = 4 * concurrency
    engine = Engine(profile, seed=seed)
    numbers: dict[int, int] = {}
    issued = 0

    def issue() -> None:
        nonlocal issued
        seq = Sequence(input_tokens, output_tokens)
        numbers[id(seq)] = issued
        issued += 1
        engine.add_request(seq)

    for _ in range(concurrency if requests is None else min(concurrency, requests)):
        issue()
    finished: list[tuple[int, Sequence]] = []
    max_waiting = max_running = 0
    while engine.has_work and (duration_s is None or engine.clock < duration_s):
        max_running = max(max_running, len(engine.running))
        _, outputs = engine.step()
        max_waiting = max(max_waiting, len(engine.waiting))
        for seq in outputs:
            if seq.finish_reason is not None:
                finished.append((numbers.pop(id(seq)), seq))
                if requests is None or issued < requests:
                    issue()
    return _summarise(engine, finished, concurrency, requests, input_tokens, max_waiting, max_running)


def _summarise(
    engine: Engine,
    finished: list[tuple[int, Sequence]],
    concurrency: int,
    requests: int | None,
    input_tokens: int,
    max_waiting: int,
    max_running: int,
) -> ClosedLoopResult:
    steady = _window(finished, concurrency, requests)
    e2e = [seq.e2e() for seq in steady]
    ttft = [seq.ttft() for seq in steady]
    tpot = [seq.tpot() for seq in steady if seq.num_output > 1]
    e2e_mean = statistics.fmean(e2e)
    request_rate = concurrency / e2e_mean
    output_mean = statistics.fmean(seq.num_output for seq in steady)
    return ClosedLoopResult(
        concurrency=concurrency,
        completed=len(finished),
        output_tokens_per_s=request_rate * output_mean,
        total_tokens_per_s=request_rate * (output_mean + input_tokens),
        ttft_mean=statistics.fmean(ttft),
        ttft_p50=percentile(np.array(ttft), 50),  # the report's rule, so calibrate compares like with like
        tpot_p50=percentile(np.array(tpot), 50) if tpot else 0.0,
        e2e_mean=e2e_mean,
        max_waiting=max_waiting,
        max_running=max_running,
        preemptions=engine.num_preemptions,
    )
