"""The first command on a GPU host: can this suite, and a twin calibrated on it, be trusted on this hardware?

    .venv/bin/python -m benchmarks.gpu_check --platform cuda|rocm --model PATH [--profile low-latency]
    .venv/bin/python -m benchmarks.gpu_check --platform cpu --concurrency 1,2,4,8,16  # vLLM's CPU build, tiny model

1. starts vLLM with a launch profile (deploy/profiles/; on cuda/rocm with deploy/vllm-serve.sh, on cpu with
   deploy/real-vllm.sh and its tiny model), pinned apart from the load generator on cpu;
2. cross-checks our chat client against vLLM's own benchmark client (``vllm bench serve``'s code,
   benchmarks/crosscheck_vllm_bench.py) at each concurrency: TTFT p50, TPOT p50, output tok/s;
3. measures steady levels at every concurrency with the scenario runner, calibrates the twin
   (``python -m simulator calibrate``) on the lower half and stops vLLM;
4. runs the twin at the upper half and writes ``OUT/gpu_check.md``: the cross-check and the twin's fidelity, each
   with its error (benchmarks/twin.md, docs/guides/twin.md).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import requests

from benchmarks import crosscheck_vllm_bench as crosscheck
from benchmarks.client_streams import pinned
from vllm_stress.analysis.report.pipeline import run_levels
from vllm_stress.scenarios.run.runner import free_port
from vllm_stress.scenarios.studies import calibrate

REPO = crosscheck.REPO
SCENARIO = "twin-calibrate"  # fixed-size chat requests, short steady levels
# launch-profile keys that are no flag of the CPU build (it has no GPUs to split or fill)
GPU_ONLY = ("TENSOR_PARALLEL_SIZE", "GPU_MEMORY_UTILIZATION")
METRICS = {
    "output_tokens_per_s": ("output tok/s", 1.0),
    "ttft_p50_s": ("TTFT p50 ms", 1e3),
    "tpot_p50_s": ("TPOT p50 ms", 1e3),
}
BENCH_FIGURES = {"ttft_p50_s": "ttft_ms", "tpot_p50_s": "tpot_ms", "output_tokens_per_s": "output_tok_s"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--platform", choices=("cuda", "rocm", "cpu"), required=True)
    parser.add_argument("--model", default="", help="model path or name (cpu: deploy/real-vllm.sh's tiny model)")
    parser.add_argument("--profile", default="low-latency", help="launch profile in deploy/profiles (%(default)s)")
    parser.add_argument("--serve-arg", action="append", default=[], help="extra vllm serve flag (repeatable)")
    parser.add_argument("--concurrency", default="1,4,16,64,256", help="levels, comma-separated (%(default)s)")
    parser.add_argument("--input-tokens", type=int, default=128, help="prompt tokens, chat template included")
    parser.add_argument("--output-tokens", type=int, default=64)
    parser.add_argument("--step-time", type=int, default=30, help="hold of each measured level, s (%(default)s)")
    parser.add_argument("--requests-per-user", type=int, default=4, help="vllm bench requests per concurrency")
    parser.add_argument("--twin-base", default="", help="simulator profile the twin starts from (cpu: cpu-tiny)")
    parser.add_argument("--start-timeout", type=float, default=900, help="seconds vLLM may take to start")
    parser.add_argument("--out", default="results/gpu-check")
    args = parser.parse_args(argv)
    args.levels = [int(level) for level in args.concurrency.split(",")]
    if len(args.levels) < 2 or sorted(args.levels) != args.levels:
        parser.error("--concurrency needs at least two levels, rising")
    args.twin_base = args.twin_base or ("cpu-tiny" if args.platform == "cpu" else "h100-llama-3.1-8b")
    return args


def profile_flags(name: str, platform: str) -> list[str]:
    """A launch profile's KEY=VALUE lines as vllm serve flags (MAX_NUM_SEQS=512 -> --max-num-seqs 512)."""
    path = REPO / "deploy" / "profiles" / f"{name}.env"
    if not path.is_file():
        sys.exit(f"gpu_check: no launch profile {path}")
    flags = []
    for line in path.read_text().splitlines():
        key, equals, value = line.partition("=")
        if equals and not key.startswith("#") and not (platform == "cpu" and key in GPU_ONLY):
            flags += [f"--{key.lower().replace('_', '-')}", value]
    return flags


@contextlib.contextmanager
def vllm_server(args: argparse.Namespace, flags: list[str], folder: Path) -> Iterator[dict[str, str]]:
    """{URL, MODEL, CLIENT_CPUS, TOKENIZER} of a vLLM started with ``flags``, stopped (only it) at the end."""
    if args.platform == "cpu":
        env = os.environ | {"REAL_VLLM_STATE": str(folder / "server.env")}
        subprocess.run(["bash", crosscheck.SCRIPT, "start", *flags], env=env, check=True, stdout=subprocess.DEVNULL)
        try:
            state = dict(line.split("=", 1) for line in (folder / "server.env").read_text().splitlines())
            yield state | {"TOKENIZER": str(crosscheck.HOME / "model")}
        finally:
            subprocess.run(["bash", crosscheck.SCRIPT, "stop"], env=env, check=True)
        return
    port = free_port()
    command = ["bash", str(REPO / "deploy" / "vllm-serve.sh"), "--platform", args.platform, "--profile", args.profile]
    command += ["--model", args.model, "--port", str(port), "--", *flags]
    with (folder / "server.log").open("w") as log:
        server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_model(url, server, args.start_timeout)
        yield {"URL": url, "MODEL": args.model, "CLIENT_CPUS": "", "TOKENIZER": args.model}
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # vllm-serve.sh stops its container on SIGTERM
        server.wait(timeout=120)


def wait_for_model(url: str, server: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            sys.exit(f"gpu_check: vLLM exited with {server.returncode} before serving (its log: server.log)")
        with contextlib.suppress(requests.RequestException):
            if requests.get(url + "/v1/models", timeout=5).ok:
                return
        time.sleep(2)
    sys.exit(f"gpu_check: vLLM did not serve within {timeout_s:.0f} s")


def scenario_run(args: argparse.Namespace, out: Path, levels: list[int], target: list[str], pin: str) -> Path:
    """``python -m scenarios run`` of SCENARIO at ``levels`` (against ``target`` args), pinned to ``pin``."""
    command = [sys.executable, "-m", "scenarios", "run", "--scenario", SCENARIO, "--workers", "1", "--overwrite"]
    command += ["--out", str(out), *target, f"--locust-arg=--levels={','.join(map(str, levels))}"]
    command += [
        f"--locust-arg=--{key}={getattr(args, key.replace('-', '_'))}"
        for key in ("step-time", "input-tokens", "output-tokens")
    ]
    subprocess.run(pinned(pin, command) if pin else command, cwd=REPO, check=True)
    return out / "run-1"


def crosscheck_at(args: argparse.Namespace, server: dict[str, str], out: Path, users: int, overhead: int) -> tuple:
    """vLLM's benchmark client at ``users`` concurrency, then ours for as long right after it (one round of
    benchmarks/crosscheck_vllm_bench.py): the two runs, each with its figures."""
    bench_args = argparse.Namespace(
        model=server["MODEL"],
        tokenizer=server["TOKENIZER"],
        input_tokens=args.input_tokens,
        output_tokens=args.output_tokens,
        requests=max(8, args.requests_per_user * users),
        concurrency=users,
        client_cpus=server["CLIENT_CPUS"],
    )
    folder = out / f"bench-c{users}"
    folder.mkdir(parents=True, exist_ok=True)
    bench = crosscheck.run_vllm_bench(bench_args, server["URL"], folder, overhead)
    return bench, crosscheck.run_locust(bench_args, server["URL"], folder / "locust", bench["duration_s"])


def levels_of(*runs: Path) -> dict[int, dict]:
    """users -> the level's row (the report's own, run_levels) over the given run folders."""
    return {int(row["users"]): row for run in runs for row in run_levels(run).to_dict("records")}


def error_cell(value: float, reference: float, scale: float) -> str:
    return f"{reference * scale:.4g} | {value * scale:.4g} | {value / reference - 1:+.1%}"


def header(args: argparse.Namespace, flags: list[str], wall_s: float) -> list[str]:
    return [
        f"# gpu_check: {args.platform}, model {args.model or 'tiny-qwen2'}, profile {args.profile} ({' '.join(flags)})",
        "",
        f"Concurrency {args.concurrency}; prompts {args.input_tokens} tokens, outputs {args.output_tokens}; "
        f"levels held {args.step_time} s; wall time {wall_s / 60:.1f} min.",
    ]


def crosscheck_lines(pairs: dict[int, tuple[dict, dict]]) -> list[str]:
    """Per concurrency: vllm bench's figure, ours right after it, and the difference."""
    names = ("TTFT p50 ms", "TPOT p50 ms", "output tok/s")
    lines = [
        "",
        "## Our client against vllm bench serve (same server and sizes, one right after the other)",
        "",
        "| users | requests (bench / ours) | "
        + " | ".join(f"{name}: vllm bench | ours | difference" for name in names)
        + " |",
        "|---|---|" + "---|---|---|" * len(names),
    ]
    for users, (bench, ours) in pairs.items():
        cells = [error_cell(ours["figures"][key], bench["figures"][key], 1.0) for key in BENCH_FIGURES.values()]
        lines.append(f"| {users} | {bench['requests']} / {ours['requests']} | " + " | ".join(cells) + " |")
    return lines


def twin_lines(real: dict[int, dict], twin: dict[int, dict], fit: str) -> list[str]:
    """Per predicted level: the real server's figure, the twin's, and the twin's error."""
    low = sorted(set(real) - set(twin))
    fitted = [users for users in low if real[users]["steady"]]
    lines = [
        "",
        f"## The twin: calibrated on {', '.join(map(str, low))} users, predicting the rest",
        "",
        f"Calibration on the steady levels {', '.join(map(str, fitted))} (of {len(low)}; a level that is not steady "
        f"is left out of the fit): {fit}.",
        *(
            []
            if len(fitted) > 1
            else [
                "",
                "**Fitted to fewer than two steady levels**: three figures cannot fix the step time's four constants, "
                "so the prediction below does not test the twin. Run again with a longer --step-time.",
            ]
        ),
        "",
        "| users | steady (real / twin) | "
        + " | ".join(f"{name}: real | twin | error" for name, _ in METRICS.values())
        + " |",
        "|---|---|" + "---|---|---|" * len(METRICS),
    ]
    for users, predicted in twin.items():
        cells = [error_cell(predicted[f], real[users][f], scale) for f, (_, scale) in METRICS.items()]
        steady = f"{bool(real[users]['steady'])} / {bool(predicted['steady'])}"
        lines.append(f"| {users} | {steady} | " + " | ".join(cells) + " |")
    return lines


def frontend_lines(real: dict[int, dict]) -> list[str]:
    """Per real level, the time vLLM's API server held a request outside its engine (Little's law on its own HTTP
    and e2e histograms): the twin has a part of it, its API server's time before the engine (t_frontend, fitted)."""
    lines = [
        "",
        "## Outside the engine: vLLM's API server per request (real levels)",
        "",
        "| users | requests/s | HTTP-held − engine-held | frontend ms per request | API server CPU % |",
        "|---|---|---|---|---|",
    ]
    for users, level in real.items():
        outside = level["server_http_held_mean"] - level["server_in_system_mean"]
        per_request = outside / level["requests_per_s"] * 1e3
        cpu = level["server_frontend_cpu_percent"]
        lines.append(f"| {users} | {level['requests_per_s']:.3g} | {outside:.3g} | {per_request:.3g} ms | {cpu:.0f} |")
    return lines


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    started = time.monotonic()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    flags = profile_flags(args.profile, args.platform) + args.serve_arg
    split = (len(args.levels) + 1) // 2
    low, high = args.levels[:split], args.levels[split:]
    launch = {"kind": "server-cmd", "command": ["vllm", "serve", args.model or "tiny-qwen2", *flags]}
    with vllm_server(args, flags, out) as server:
        overhead = crosscheck.chat_overhead(server["URL"], server["MODEL"])
        pairs = {users: crosscheck_at(args, server, out, users, overhead) for users in args.levels}
        target = ["--target", server["URL"], f"--locust-arg=--server-launch={json.dumps(launch)}"]
        measured = [
            scenario_run(args, out / name, part, target, server["CLIENT_CPUS"])
            for name, part in (("real-low", low), ("real-high", high))
        ]
    if calibrate.main(["--from-run", str(measured[0]), "--out", str(out / "twin.toml"), "--base", args.twin_base]):
        sys.exit("gpu_check: the calibration refused the low levels (see above)")
    fit = next(line for line in (out / "twin.toml").read_text().splitlines() if line.startswith("twin_error"))
    twin_run = scenario_run(args, out / "twin-high", high, [f"--simulator-arg=--profile={out / 'twin.toml'}"], "")
    real = levels_of(*measured)
    fit_text = fit.split("=", 1)[1].strip(' "')
    lines = header(args, flags, time.monotonic() - started) + crosscheck_lines(pairs)
    text = "\n".join(lines + twin_lines(real, levels_of(twin_run), fit_text) + frontend_lines(real)) + "\n"
    (out / "gpu_check.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
