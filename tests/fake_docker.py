"""A stand-in for the ``docker`` CLI with the part of its behaviour the matrix lifecycle depends on.

``docker run --name N -p HOST:PORT:8000 ... IMAGE serve MODEL FLAGS`` starts the embedded simulator as the
"container", in its own session, with only the environment passed by ``--env`` (as docker does), and then waits for
it like an attached docker client: a signal to this client does not reach the container. ``docker stop N`` records
the container's own count of finished requests (``vllm:request_success_total``) and stops it. Every call is appended
to ``$FAKE_DOCKER_DIR/calls.jsonl``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import requests

REPO = Path(__file__).resolve().parent.parent
STATE = Path(os.environ["FAKE_DOCKER_DIR"])
SIMULATOR_FLAGS = {"--max-num-seqs", "--max-num-batched-tokens", "--max-model-len"}  # vLLM flags it also knows


def record(**entry) -> None:
    with open(STATE / "calls.jsonl", "a") as f:
        f.write(json.dumps(entry) + "\n")


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False


def value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def run(argv: list[str]) -> int:
    name = value(argv, "--name")
    pid_file = STATE / f"{name}.pid"
    if pid_file.exists() and alive(int(pid_file.read_text())):
        print(
            f'docker: Error response from daemon: Conflict. The container name "/{name}" is already in use',
            file=sys.stderr,
        )
        return 125
    host, port, _ = value(argv, "-p").rsplit(":", 2)
    env = {"PATH": os.environ["PATH"]}
    for i, arg in enumerate(argv):
        if arg == "--env":
            key, sep, val = argv[i + 1].partition("=")
            env[key] = val if sep else os.environ.get(key, "")
    serve = argv.index("serve")
    model, flags = argv[serve + 1], argv[serve + 2 :]
    sim_flags = [
        arg for key, val in zip(flags[::2], flags[1::2], strict=True) if key in SIMULATOR_FLAGS for arg in (key, val)
    ]
    container = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "vllm_stress.simulator",
            "--host",
            host,
            "--port",
            port,
            "--profile",
            "cpu-tiny",
            "--served-model-name",
            model,
            *sim_flags,
        ],
        cwd=REPO,
        env=env,
        start_new_session=True,
    )
    pid_file.write_text(str(container.pid))
    record(command="run", name=name, argv=argv, key_in_env=bool(env.get("VLLM_API_KEY")))
    return container.wait()


def stop(name: str) -> int:
    pid_file = STATE / f"{name}.pid"
    if not pid_file.exists() or not alive(pid := int(pid_file.read_text())):
        print(f"Error response from daemon: No such container: {name}", file=sys.stderr)
        return 1
    calls = [json.loads(line) for line in (STATE / "calls.jsonl").read_text().splitlines()]
    run_argv = [c for c in calls if c["command"] == "run" and c["name"] == name][-1]["argv"]
    port = value(run_argv, "-p").rsplit(":", 2)[1]
    metrics = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    served = sum(
        float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines() if line.startswith("vllm:request_success_total")
    )
    record(command="stop", name=name, served=served)
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if alive(pid):
        os.kill(pid, signal.SIGKILL)
    pid_file.unlink()
    print(name)
    return 0


def main(argv: list[str]) -> int:
    if argv[0] == "run":
        return run(argv[1:])
    if argv[0] == "stop":
        return stop(argv[1])
    print(f"fake docker: {argv[0]} is not modelled", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
