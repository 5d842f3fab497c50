"""Runs an SLO search: probes each load the bisection asks for on a Locust master with workers, judges it, and
rewrites search.json and search.md after every probe."""

from __future__ import annotations

import logging
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm_stress.core.slo import Slo
from vllm_stress.scenarios.run.config import read_config, with_overrides
from vllm_stress.scenarios.run.errors import ScenarioError
from vllm_stress.scenarios.run.folders import complete, prepare_out
from vllm_stress.scenarios.run.runner import default_workers, run_locust
from vllm_stress.scenarios.run.servers import api_headers, launch_args, server
from vllm_stress.scenarios.search.bisection import bracket, next_load
from vllm_stress.scenarios.search.judge import Probe, judge
from vllm_stress.scenarios.search.result import RESULT_FILE, load_probes, result, save
from vllm_stress.scenarios.search.space import DEFAULT_POOL_SECONDS, Space, check_space
from vllm_stress.scenarios.search.writeup import REPORT_FILE, markdown

log = logging.getLogger("scenarios")


@dataclass
class Probing:
    """How each probe runs: the scenario's Locust config against one server, ``repeats`` times, into one search
    folder."""

    name: str
    config: Path
    keys: dict[str, str]
    url: str
    out: Path
    workers: int
    locust_args: list[str]  # the search's, then a probe's load, then how the server was started
    launch: list[str]
    web_port: int
    repeats: int
    max_probes: int

    def run(self, space: Space, load: float, run_dir: Path, label: str) -> None:
        """One run of the probe at ``load`` into ``run_dir``; ``label`` goes before its progress lines."""
        run_locust(
            self.name,
            self.config,
            self.keys | {"levels": str(space.users_for(load))},
            self.url,
            run_dir,
            self.workers,
            [*self.locust_args, *space.locust_args(load), "--overwrite", *self.launch],
            web_port=self.web_port,
            label=label,
        )


def search(
    name: str,
    out: Path,
    slos: list[Slo],
    *,
    target: str | None = None,
    over: str = "users",
    low: float | None = None,
    high: float | None = None,
    precision: float = 0.1,
    max_probes: int = 12,
    repeats: int = 1,
    pool_seconds: float = DEFAULT_POOL_SECONDS,
    web_port: int = 0,
    workers: int | None = None,
    overwrite: bool = False,
    simulator_args: list[str] | None = None,
    locust_args: list[str] | None = None,
) -> dict[str, Any]:
    """Run the search (docs/concepts/scenarios.md); returns what ``search.json`` holds."""
    space = check_space(over, low, high, precision, pool_seconds)
    check_limits(repeats, max_probes, web_port)
    config, keys = read_config(name)
    out = out.resolve()
    locust_args = ["--step-time=auto", *(locust_args or [])]
    keys = with_overrides(keys, locust_args)
    if not (out / RESULT_FILE).is_file():  # a search folder is resumed; anything else must be new or overwritten
        prepare_out(out, overwrite)
    probes = {probe.load: probe for probe in load_probes(out, space, repeats)}
    sim_args = shlex.split(keys.get("simulator", "")) + list(simulator_args or [])
    with server(target, sim_args, headers=api_headers(locust_args)) as url:
        probing = Probing(
            name,
            config,
            keys,
            url,
            out,
            workers=workers or default_workers(),
            locust_args=locust_args,
            launch=launch_args(target, sim_args),
            web_port=web_port,
            repeats=repeats,
            max_probes=max_probes,
        )
        while (load := next_load(probes, space)) is not None and len(probes) < max_probes:
            probes[load] = probe(probing, probes, space, load, slos)
            log.info("probe at %s: %s", space.label(load), "passes" if probes[load].passed else probes[load].reason)
            write(out, name, slos, probes, space, repeats)
    return write(out, name, slos, probes, space, repeats)


def check_limits(repeats: int, max_probes: int, web_port: int) -> None:
    if repeats < 1 or max_probes < 1:
        raise ScenarioError(f"--repeats and --max-probes must be at least 1, got {repeats} and {max_probes}")
    if not 0 <= web_port <= 65535:
        raise ScenarioError(f"--web-port must be a TCP port (1-65535), got {web_port}")


def probe(probing: Probing, probes: dict[float, Probe], space: Space, load: float, slos: list[Slo]) -> Probe:
    """The probe at ``load``: its runs that are not complete yet (a resumed search keeps the others), judged."""
    run_dirs = [probing.out / space.folder(load) / f"run-{run}" for run in range(1, probing.repeats + 1)]
    for run, run_dir in enumerate(run_dirs, 1):
        if complete(run_dir):
            continue
        note = progress_note(probes, space, load, len(probes) + 1, probing.max_probes, run, probing.repeats)
        log.info("%s against %s -> %s", note, probing.url, run_dir)
        probing.run(space, load, run_dir, note)
    return judge(run_dirs, load, space.users_for(load), slos, space)


def progress_note(
    probes: dict[float, Probe], space: Space, load: float, number: int, max_probes: int, run: int, repeats: int
) -> str:
    """'SLO search probe 3 of at most 12: 48 users, run 1 of 1; so far 32 users passes, 64 users fails (...)': the
    line before each probe's progress lines (--run-label: its console, LLM tab and dashboard) and the log prints."""
    note = f"SLO search probe {number} of at most {max_probes}: {space.label(load)}, run {run} of {repeats}"
    best, above = bracket(probes)
    verdicts = [f"{space.label(best.load)} passes"] if best else []
    verdicts += [f"{space.label(above.load)} fails ({above.reason})"] if above else []
    return note + ("; so far " + ", ".join(verdicts) if verdicts else "; no verdict yet")


def write(
    out: Path, name: str, slos: list[Slo], probes: dict[float, Probe], space: Space, repeats: int
) -> dict[str, Any]:
    """search.json and search.md: every probe, the answer and its bracket, the SLO that binds."""
    search_result = result(name, slos, probes, space, repeats)
    save(out, search_result)
    (out / REPORT_FILE).write_text(markdown(search_result, slos, space))
    return search_result
