"""``python -m scenarios parallel``: fixed question sets run to completion at parallelism 1, 4, 16 ..., with speedup,
accuracy and the answers that change with parallelism (docs/concepts/scenarios.md, section 7)."""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import logging
import os
import time
from pathlib import Path

import aiohttp
import requests

from vllm_stress.analysis.report.parallel import ParallelSummary, summarise, write_report
from vllm_stress.core import served
from vllm_stress.core.failures import failure_name
from vllm_stress.core.grading import grade
from vllm_stress.core.questions import MAX_TOKENS, DatasetError, Question, load_questions, prompt
from vllm_stress.scenarios.run.errors import ScenarioError
from vllm_stress.scenarios.run.folders import prepare_out
from vllm_stress.scenarios.run.servers import server

log = logging.getLogger("vllm_stress.scenarios.studies.parallel")

DEFAULT_PROFILE = "h100-llama-3.1-8b"
ANSWERS_FILE = "answers.csv"
ANSWER_COLUMNS = [
    "dataset",  # file name of the dataset without .jsonl
    "question_id",  # the line's "id", else its line number
    "parallel",  # requests in flight at once (P)
    "answer_text",  # the reply's message content
    "extracted",  # the letter or number the grader read from it; empty when none
    "gold",  # the right answer
    "correct",  # True / False
    "e2e_s",  # from the send to the end of the response body
    "prompt_tokens",  # from the server's usage
    "completion_tokens",  # from the server's usage
    "finish_reason",  # stop, length ...
    "error",  # "HTTP 500", "TimeoutError" ...; empty on success
]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dataset",
        action="append",
        required=True,
        type=Path,
        metavar="FILE",
        help="JSONL file of MMLU- or GSM8K-shaped questions (repeatable), e.g. scenarios/data/synthetic-mc.jsonl",
    )
    parser.add_argument(
        "--parallel",
        default="1,4,16",
        type=parse_parallel,
        help="comma-separated requests in flight; the first is the speedup baseline (%(default)s)",
    )
    parser.add_argument("--target", default="", help="Base URL of the server (default: start the embedded simulator)")
    parser.add_argument(
        "--limit", type=int, default=0, help="Only the first N questions of each dataset (default: all)"
    )
    parser.add_argument("--seed", type=int, default=1234, help="'seed' of every request (%(default)s)")
    parser.add_argument("--timeout", type=float, default=600.0, help="Seconds one request may take (%(default)s)")
    parser.add_argument(
        "--api-key",
        default=os.environ.get("OPENAI_API_KEY", ""),
        help="Sent as 'Authorization: Bearer KEY' (default: $OPENAI_API_KEY, which other users of the "
        "machine cannot read, unlike a command line)",
    )
    parser.add_argument("--out", required=True, type=Path, help="Output folder")
    parser.add_argument("--overwrite", action="store_true", help="Replace the output folder if it exists")
    parser.add_argument(
        "--simulator-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="Extra argument for the embedded simulator (repeatable), e.g. --simulator-arg=--answer-flip-rate=0.01",
    )


def parse_parallel(text: str) -> list[int]:
    """``"1,4,16"`` -> ``[1, 4, 16]``: distinct whole numbers of at least 1."""
    try:
        levels = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers, got {text!r}") from None
    if not levels or min(levels) < 1 or len(set(levels)) != len(levels):
        raise argparse.ArgumentTypeError(f"expected distinct whole numbers of at least 1, got {text!r}")
    return levels


def run_from_args(args: argparse.Namespace) -> ParallelSummary:
    if args.limit < 0 or args.timeout <= 0:
        raise ScenarioError("--limit must be positive and --timeout above 0")
    simulator_args = list(args.simulator_arg)
    if not any(arg.startswith("--profile") for arg in simulator_args):
        simulator_args = ["--profile", DEFAULT_PROFILE, *simulator_args]
    return run_parallel(
        args.dataset,
        args.parallel,
        args.out.resolve(),
        target=args.target or None,
        simulator_args=simulator_args,
        limit=args.limit or None,
        seed=args.seed,
        timeout=args.timeout,
        api_key=args.api_key,
        overwrite=args.overwrite,
    )


def run_parallel(
    paths: list[Path],
    levels: list[int],
    out: Path,
    *,
    target: str | None,
    simulator_args: list[str],
    limit: int | None,
    seed: int,
    timeout: float,
    api_key: str = "",
    overwrite: bool = False,
) -> ParallelSummary:
    """Run every dataset at every level and write answers.csv and the report into ``out``; returns the summary."""
    datasets = load_datasets(paths, limit)
    prepare_out(out, overwrite)
    api_key = api_key.strip()  # a key file's or a Secret's trailing newline would break every request
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    with server(target, simulator_args) as url:
        model = served_model(url, headers)
        rows, walls = asyncio.run(run_all(url, model, datasets, levels, seed, timeout, headers))
    write_answers(rows, out / ANSWERS_FILE)
    meta = {
        "target": target or "embedded simulator",
        "simulated": target is None,
        "model": model,
        "seed": seed,
        "simulator_args": simulator_args if target is None else [],
        "max_tokens": MAX_TOKENS,
        "datasets": {
            name: {"path": str(path), "kind": questions[0].kind, "questions": len(questions)}
            for (name, questions), path in zip(datasets.items(), paths, strict=True)
        },
    }
    summary = summarise(rows, walls, meta)
    write_report(summary, out)
    return summary


def load_datasets(paths: list[Path], limit: int | None) -> dict[str, list[Question]]:
    names = [path.name.removesuffix(".jsonl") for path in paths]
    if len(set(names)) != len(names):
        raise ScenarioError(f"two datasets share a name: {', '.join(names)}")
    try:
        return {name: load_questions(path, limit) for name, path in zip(names, paths, strict=True)}
    except DatasetError as error:
        raise ScenarioError(str(error)) from None


def served_model(url: str, headers: dict) -> str:
    try:
        return next(iter(served.models(url, headers, timeout=30)))
    except (requests.RequestException, ValueError, StopIteration) as error:
        raise ScenarioError(f"{url}/v1/models did not name a model ({type(error).__name__}: {error})") from None


async def run_all(
    url: str,
    model: str,
    datasets: dict[str, list[Question]],
    levels: list[int],
    seed: int,
    timeout: float,
    headers: dict,
) -> tuple[list[dict], dict[tuple[str, int], float]]:
    """Every dataset at every level: (answer rows, {(dataset, P): wall-clock seconds})."""
    endpoint = url.rstrip("/") + "/v1/chat/completions"
    rows, walls = [], {}
    client_timeout = aiohttp.ClientTimeout(total=timeout)
    async with aiohttp.ClientSession(timeout=client_timeout, headers=headers) as session:
        await ask(session, endpoint, model, next(iter(datasets.values()))[0], seed)  # warm-up, not recorded
    for name, questions in datasets.items():
        for parallel in levels:
            connector = aiohttp.TCPConnector(limit=parallel)
            async with aiohttp.ClientSession(connector=connector, timeout=client_timeout, headers=headers) as session:
                answers, wall = await run_level(session, endpoint, model, questions, parallel, seed)
            walls[name, parallel] = wall
            rows += [{"dataset": name, "parallel": parallel, **answer} for answer in answers]
            log.info("%s at P=%d: %d questions in %.2f s", name, parallel, len(questions), wall)
    return rows, walls


async def run_level(
    session: aiohttp.ClientSession, endpoint: str, model: str, questions: list[Question], parallel: int, seed: int
) -> tuple[list[dict], float]:
    """All ``questions``, ``parallel`` at a time: (one row per question in question order, wall-clock seconds)."""
    answers: list[dict] = [{} for _ in questions]
    pending = iter(enumerate(questions))  # shared by the workers: each takes the next question when it is free

    async def worker() -> None:
        for index, question in pending:
            answers[index] = await ask(session, endpoint, model, question, seed)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(min(parallel, len(questions)))))
    return answers, time.perf_counter() - started


async def ask(session: aiohttp.ClientSession, endpoint: str, model: str, question: Question, seed: int) -> dict:
    """One question as a non-streaming chat request, graded; failures become rows with an ``error``."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt(question)}],
        "temperature": 0,
        "seed": seed,
        "max_tokens": MAX_TOKENS[question.kind],
    }
    started = time.perf_counter()
    reply, error = {}, ""
    try:
        async with session.post(endpoint, json=body) as response:
            payload = await response.read()
            if response.status == 200:
                reply = json.loads(payload)
            else:
                error = f"HTTP {response.status}: {payload[:200].decode(errors='replace')}"
    except (aiohttp.ClientError, TimeoutError, ValueError) as failure:
        error = failure_name(failure)
    e2e = time.perf_counter() - started
    choice = (reply.get("choices") or [{}])[0]
    text = (choice.get("message") or {}).get("content") or ""
    extracted, correct = grade(question.kind, text, question.gold)
    usage = reply.get("usage") or {}
    return {
        "question_id": question.id,
        "answer_text": text,
        "extracted": extracted or "",
        "gold": question.gold,
        "correct": correct,
        "e2e_s": round(e2e, 6),
        "prompt_tokens": usage.get("prompt_tokens"),
        "completion_tokens": usage.get("completion_tokens"),
        "finish_reason": choice.get("finish_reason") or "",
        "error": error,
    }


def write_answers(rows: list[dict], path: Path) -> None:
    with path.open("w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=ANSWER_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
