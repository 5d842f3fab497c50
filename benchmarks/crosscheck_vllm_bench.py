"""Cross-check our chat user against vLLM's own benchmark client on the same real vLLM server.

    .venv/bin/python -m benchmarks.crosscheck_vllm_bench [--url URL] [--concurrency 4] [--rounds 6] [--requests 100]

Each round runs ``vllm.benchmarks.serve`` (the code behind ``vllm bench serve``; its console script does not work
in the CPU build, so it is driven from Python in the vLLM venv) with the random dataset, ``--ignore-eos``, a fixed
concurrency and request count, then ``locust -f locustfiles/chat.py`` with as many users for the time the
benchmark took. Both send chat requests of the same prompt length (the benchmark's random prompt plus the chat
template) and output length. Per round it compares median TTFT, median TPOT and output tok/s (tokens over the
time from the first request sent to the last one finished). Without ``--url`` it starts the real vLLM with
deploy/real-vllm.sh (pinned to its cores) and stops it at the end. Both clients run pinned to ``--client-cpus``
(``taskset -c``; default: the cores deploy/real-vllm.sh left to the load generator, none with ``--url``), apart
from the server's: the CPU vLLM's engine threads run on every core they may use, and a client beside them stalls
them. Raw results go to ``--out``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import requests

from benchmarks.client_streams import pinned
from benchmarks.harness import read_rows

REPO = Path(__file__).resolve().parent.parent

SCRIPT = REPO / "deploy" / "real-vllm.sh"
# deploy/real-vllm.sh's install: REAL_VLLM_HOME, else its default in the user cache
HOME = Path(
    os.environ.get("REAL_VLLM_HOME")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "vllm-stress" / "real-vllm"
)
VLLM_PYTHON = Path(os.environ.get("REAL_VLLM_VENV", HOME / "venv")) / "bin" / "python"
BENCH = """
import sys
from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser

parser = FlexibleArgumentParser()
add_cli_args(parser)
main(parser.parse_args(sys.argv[1:]))
"""


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="", help="a running real vLLM (default: start one with deploy/real-vllm.sh)")
    parser.add_argument("--model", default="tiny-qwen2", help="served model name")
    parser.add_argument("--tokenizer", default=str(HOME / "model"), help="tokenizer directory for vLLM's client")
    parser.add_argument("--input-tokens", type=int, default=128, help="prompt tokens as the server counts them")
    parser.add_argument("--output-tokens", type=int, default=64)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--requests", type=int, default=100, help="requests per vLLM benchmark run")
    parser.add_argument("--rounds", type=int, default=6, help="benchmark + locust pairs, alternating")
    parser.add_argument("--out", default="results/crosscheck", help="folder for the raw results")
    parser.add_argument(
        "--client-cpus",
        default=None,
        help="taskset core list for both clients (default: deploy/real-vllm.sh's CLIENT_CPUS)",
    )
    return parser.parse_args()


def client_side(args, cmd: list[str]) -> list[str]:
    """``cmd`` pinned to the clients' cores, when there are any."""
    return pinned(args.client_cpus, cmd) if args.client_cpus else cmd


def chat_overhead(url: str, model: str) -> int:
    """Tokens the chat template adds around one user message (the benchmark's random prompt excludes them)."""
    body = {"model": model, "messages": [{"role": "user", "content": ""}], "add_generation_prompt": True}
    resp = requests.post(url + "/tokenize", json=body, timeout=10)
    resp.raise_for_status()
    return resp.json()["count"]


def run_vllm_bench(args, url: str, out: Path, overhead: int) -> dict:
    """vLLM's client on the chat endpoint; its own figures and its per-request samples."""
    cmd = [
        str(VLLM_PYTHON),
        "-c",
        BENCH,
        "--backend",
        "openai-chat",
        "--endpoint",
        "/v1/chat/completions",
        "--base-url",
        url,
        "--model",
        args.model,
        "--tokenizer",
        args.tokenizer,
        "--dataset-name",
        "random",
        "--random-input-len",
        str(args.input_tokens - overhead),
        "--random-output-len",
        str(args.output_tokens),
        "--num-prompts",
        str(args.requests),
        "--max-concurrency",
        str(args.concurrency),
        "--ignore-eos",
        "--num-warmups",
        str(args.concurrency),
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--metric-percentiles",
        "50,99",
        "--disable-tqdm",
        "--save-result",
        "--save-detailed",
        "--result-dir",
        str(out),
        "--result-filename",
        "vllm_bench.json",
    ]
    env = os.environ | {"HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(client_side(args, cmd), cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        sys.exit(f"vllm bench failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    result = json.loads((out / "vllm_bench.json").read_text())
    done = [
        (t, e, n)
        for t, e, n, err in zip(
            result["ttfts"], result["latencies"], result["output_lens"], result["errors"], strict=True
        )
        if not err
    ]
    return {
        "requests": result["completed"],
        "failed": result["failed"],
        "duration_s": result["duration"],
        "prompt_tokens": result["total_input_tokens"] / result["completed"],
        "tokens": result["total_output_tokens"],
        "ttfts": [t for t, _, _ in done],
        "tpots": [(e - t) / (n - 1) for t, e, n in done if n > 1],
        "figures": {
            "ttft_ms": result["median_ttft_ms"],
            "tpot_ms": result["median_tpot_ms"],
            "output_tok_s": result["output_throughput"],
        },
    }


def run_locust(args, url: str, out: Path, seconds: float) -> dict:
    """Our chat user, as many users as the benchmark's concurrency, for the benchmark's duration."""
    cmd = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        "locustfiles/chat.py",
        "-H",
        url,
        "--model",
        args.model,
        "-u",
        str(args.concurrency),
        "-r",
        "100",
        "-t",
        f"{max(1, round(seconds))}s",
        "--stop-timeout",
        "120",
        "--input-tokens",
        str(args.input_tokens),
        "--output-tokens",
        str(args.output_tokens),
        "--canary-share",  # no correctness canaries: the same requests as the benchmark's, every one of the length
        "0",
        "--headless",
        "--only-summary",
        "-L",
        "WARNING",
        "--results-dir",
        str(out),
        "--overwrite",
    ]
    proc = subprocess.run(client_side(args, cmd), cwd=REPO, capture_output=True, text=True, timeout=seconds + 300)
    if proc.returncode != 0:
        sys.exit(f"locust failed:\n{proc.stderr[-3000:]}")
    rows = read_rows(out / "requests.csv")
    done = [r for r in rows if r["ok"] == "1"]
    run = {
        "requests": len(done),
        "failed": len(rows) - len(done),
        "duration_s": max(float(r["end_time"]) for r in done) - min(float(r["start_time"]) for r in done),
        "prompt_tokens": statistics.mean(int(r["prompt_tokens"]) for r in done),
        "tokens": sum(int(r["completion_tokens"]) for r in done),
        "ttfts": [float(r["ttft_s"]) for r in done],
        "tpots": [float(r["tpot_s"]) for r in done if r["tpot_s"]],
    }
    return run | {"figures": figures([run])}


def figures(runs: list[dict]) -> dict:
    """Median TTFT and TPOT over every request of the runs, and output tokens over their summed durations."""
    return {
        "ttft_ms": 1000 * statistics.median(t for run in runs for t in run["ttfts"]),
        "tpot_ms": 1000 * statistics.median(t for run in runs for t in run["tpots"]),
        "output_tok_s": sum(run["tokens"] for run in runs) / sum(run["duration_s"] for run in runs),
    }


def table(rows: list[tuple[str, dict, dict]]) -> str:
    """Markdown: per row (a round, or all rounds pooled) and metric, vLLM's figure, ours and the difference."""
    lines = ["| round | metric | vllm bench | locust chat | difference |", "|---|---|---|---|---|"]
    for label, bench, ours in rows:
        for key in ("ttft_ms", "tpot_ms", "output_tok_s"):
            theirs, mine = bench["figures"][key], ours["figures"][key]
            lines.append(f"| {label} | {key} | {theirs:.2f} | {mine:.2f} | {(mine - theirs) / theirs:+.1%} |")
        lines += [
            f"| {label} | {key} | {bench[key]:.4g} | {ours[key]:.4g} | |"
            for key in ("requests", "failed", "prompt_tokens", "duration_s")
        ]
    return "\n".join(lines)


def crosscheck(args, url: str) -> list[tuple[str, dict, dict]]:
    """Alternate the two clients round by round; returns (round, vLLM's run, ours) rows."""
    out = Path(args.out).resolve()
    overhead = chat_overhead(url, args.model)
    rounds = []
    for number in range(1, args.rounds + 1):
        folder = out / f"round-{number}"
        folder.mkdir(parents=True, exist_ok=True)
        bench = run_vllm_bench(args, url, folder, overhead)
        ours = run_locust(args, url, folder / "locust", bench["duration_s"])
        rounds.append((str(number), bench, ours))
        print(table(rounds[-1:]), flush=True)
    return rounds


def pooled(runs: list[dict]) -> dict:
    totals = {key: sum(run[key] for run in runs) for key in ("requests", "failed", "duration_s")}
    prompt = sum(run["prompt_tokens"] * run["requests"] for run in runs) / totals["requests"]
    return totals | {"prompt_tokens": prompt, "figures": figures(runs)}


@contextlib.contextmanager
def real_vllm(args, folder: Path):
    """The URL of ``--url``, or of a real vLLM started with deploy/real-vllm.sh (state file in ``folder``) and
    stopped at the end; ``args.client_cpus`` defaults to the cores the script left to the load generator."""
    if args.url:
        yield args.url.rstrip("/")
        return
    state = folder.resolve() / "server.env"
    env = os.environ | {"REAL_VLLM_STATE": str(state)}
    subprocess.run(["bash", SCRIPT, "start"], env=env, check=True, stdout=subprocess.DEVNULL)
    try:
        values = dict(line.split("=", 1) for line in state.read_text().splitlines())
        if args.client_cpus is None:
            args.client_cpus = values.get("CLIENT_CPUS", "")
        yield values["URL"]
    finally:
        subprocess.run(["bash", SCRIPT, "stop"], env=env, check=True)


def main() -> None:
    args = parse_args()
    with real_vllm(args, Path(args.out)) as url:
        rounds = crosscheck(args, url)
    every = ("all", pooled([bench for _, bench, _ in rounds]), pooled([ours for _, _, ours in rounds]))
    print("\nAll rounds (medians over every request, tokens over the summed durations):\n" + table([*rounds, every]))


if __name__ == "__main__":
    main()
