"""The analysis's capability registry (vllm_stress.analysis.features): a capability added as one module and one
registry line reaches the level rows, summary.json and the report, with no edit to levels, summary or document."""

from __future__ import annotations

import importlib.machinery
import json
import sys
import types

import pandas as pd
import pytest

from tests.helpers import small_run
from vllm_stress.analysis import features as registry
from vllm_stress.analysis.features import features
from vllm_stress.analysis.report.pipeline import analyse
from vllm_stress.analysis.report.render import Heading, Paragraph
from vllm_stress.core.capabilities import CAPABILITIES, Capability

pytestmark = pytest.mark.fast
DEMO = f"{registry.__name__}.demo"


def demo_module() -> types.ModuleType:
    """A capability's analysis module as a contributor would write it: a field, a summary key and a section."""
    module = types.ModuleType(DEMO)
    module.__spec__ = importlib.machinery.ModuleSpec(DEMO, None)
    module.FIELDS = {"demo_requests": "measured requests of the level, counted by the demo capability"}

    def level_fields(level):
        counts = level.measured.groupby("users").size().reindex(level.base.index, fill_value=0)
        return pd.DataFrame({"demo_requests": counts})

    module.level_fields = level_fields
    module.summarise = lambda config: {"demo": {"runs": len(config.runs)}}
    module.used = lambda config: config["demo"]["runs"] > 0
    module.overview = lambda label, config: [f"{label}: the demo capability ran."]
    module.blocks = lambda label, config, configs: [Heading(f"Demo: {label}"), Paragraph("demo section")]
    return module


@pytest.fixture
def demo_capability(monkeypatch):
    """The registry with a "demo" entry and its module importable, as if both had been added."""
    monkeypatch.setitem(sys.modules, DEMO, demo_module())
    monkeypatch.setattr(registry, "CAPABILITIES", (*CAPABILITIES, Capability("demo", "Demo", "first-run.md")))
    features.cache_clear()
    yield
    features.cache_clear()


def test_a_new_capability_reaches_the_rows_the_summary_and_the_report(demo_capability, tmp_path):
    run = small_run(tmp_path / "run", loops=(5, 8))
    summary = analyse([run], tmp_path / "out", labels="cfg", db="")
    by_users = {level["users"]: level for level in summary["levels"]}
    measured = {users: by_users[users]["requests"] - by_users[users]["failures"] for users in by_users}
    assert {users: level["demo_requests"] for users, level in by_users.items()} == measured
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["demo"] == {"runs": 1}
    report = (tmp_path / "out" / "report.md").read_text()
    assert "## Demo: cfg" in report and "cfg: the demo capability ran." in report


def test_a_capability_the_run_did_not_use_shows_nothing(tmp_path):
    summary = analyse([small_run(tmp_path / "run")], tmp_path / "out", labels="cfg", db="")
    config = summary["configs"]["cfg"]
    unused = [feature.capability.name for feature in features() if not feature.used(config)]
    assert {"lora", "pd", "scaling", "canaries", "structured", "reasoning", "images"} <= set(unused)
    report = (tmp_path / "out" / "report.md").read_text()
    headings = ("Scaling", "Canaries", "Structured outputs", "Agent tasks", "Traffic classes")
    assert not [heading for heading in headings if f"\n## {heading}: cfg" in report]
    assert "Disaggregated prefill/decode" not in report and "Replicas of cfg" not in report
