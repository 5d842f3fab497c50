"""``search.json``: every probe of an SLO search, the answer and its bracket, the SLO that binds; read back to resume
the search."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

from vllm_stress.core.slo import Slo
from vllm_stress.scenarios.run.errors import ScenarioError
from vllm_stress.scenarios.search.bisection import bracket, next_load
from vllm_stress.scenarios.search.judge import Probe
from vllm_stress.scenarios.search.space import Space

RESULT_FILE = "search.json"


def result(name: str, slos: list[Slo], probes: dict[float, Probe], space: Space, repeats: int) -> dict[str, Any]:
    """What ``search.json`` holds."""
    best, above = bracket(probes)
    return {
        "scenario": name,
        "over": space.over,
        "repeats": repeats,
        "pool_seconds": None if space.whole else space.pool_seconds,
        "slo": [asdict(slo) for slo in slos],
        "probes": [asdict(p) for p in sorted(probes.values(), key=lambda probe: probe.load)],
        "answer": best.load if best else None,
        "answer_users": best.users if best else None,
        "next_failing": above.load if above else None,
        "failing_reason": above.reason if above else "",
        "binding": binding(slos, best, above),
        "finished": next_load(probes, space) is None,
    }


def binding(slos: list[Slo], best: Probe | None, above: Probe | None) -> dict[str, Any] | None:
    """The SLO that binds — the one the failing probe above the answer misses by the most — with its mean and CI at
    the answer and above it."""
    if above is None:
        return None
    missed = [slo for slo in slos if slo.name in above.missed]
    if not missed:
        return None
    slo = max(missed, key=lambda s: excess(s, above.values.get(s.name)))
    at = {"answer": best, "above": above}
    return {"slo": slo.name, "limit": slo.limit} | {
        f"{key}_{part}": (probe.values if part == "value" else probe.ci95).get(slo.name) if probe else None
        for key, probe in at.items()
        for part in ("value", "ci95")
    }


def excess(slo: Slo, value: float | None) -> float:
    """How far ``value`` misses the SLO (``Slo.excess``); a value not measured misses by the most."""
    return math.inf if value is None else slo.excess(value)


def save(out: Path, search_result: dict[str, Any]) -> None:
    (out / RESULT_FILE).write_text(json.dumps(search_result, indent=2, default=float) + "\n")


def load_probes(out: Path, space: Space, repeats: int) -> list[Probe]:
    """The probes of the search folder being resumed; a folder of another kind of search is refused."""
    path = out / RESULT_FILE
    if not path.is_file():
        return []
    saved = json.loads(path.read_text())
    if (saved.get("over"), saved.get("repeats")) != (space.over, repeats):
        raise ScenarioError(
            f"{out} holds a search over {saved.get('over')} with {saved.get('repeats')} repeat(s), "
            f"not over {space.over} with {repeats}: choose another --out"
        )
    return [Probe(**probe) for probe in saved["probes"]]
