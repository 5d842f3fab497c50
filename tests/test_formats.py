"""Results that outlive a release: the run folders, summaries and results stores that earlier releases wrote
(tests/fixtures/formats/v<N>/, from the repository's history) are analysed, compared with today's and upgraded by
today's suite; a newer format is refused in one line; and a schema change without a new format and its fixture
fails here (docs/concepts/formats.md)."""

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from tests.helpers import analyse, run_cli
from vllm_stress.analysis.io import store
from vllm_stress.analysis.io.load import load_run
from vllm_stress.core import schema
from vllm_stress.core.formats import FORMAT_VERSION, FORMATS

FIXTURES = Path(__file__).parent / "fixtures" / "formats"
VERSIONS = [f.version for f in FORMATS]
TODAY = FIXTURES / f"v{FORMAT_VERSION}"


def run_of(version: int) -> Path:
    return FIXTURES / f"v{version}" / "run"


def csv_header(path: Path) -> list[str]:
    return path.read_text().splitlines()[0].split(",")


def store_columns(db: Path) -> dict[str, list[str]]:
    """Table -> column names of a results store."""
    with sqlite3.connect(db) as connection:
        tables = [name for (name,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {table: [row[1] for row in connection.execute(f"PRAGMA table_info({table})")] for table in tables}


def schema_drift(fixture: Path, tmp_path: Path) -> list[str]:
    """Where today's schema differs from what the fixture of today's format holds: a line per file. Today's summary
    and store are made by today's code, from the fixture's run."""
    files = {
        schema.REQUESTS_FILE: schema.REQUEST_COLUMNS,
        schema.LEVELS_FILE: schema.LEVEL_COLUMNS,
        schema.ITL_FILE: schema.ITL_COLUMNS,
        schema.SERVER_METRICS_FILE: schema.SERVER_METRICS_COLUMNS,
        schema.GPU_METRICS_FILE: schema.GPU_METRICS_COLUMNS,
        schema.CLIENT_HEALTH_FILE: schema.CLIENT_HEALTH_COLUMNS,
        schema.SERVER_SPANS_FILE: schema.SERVER_SPAN_COLUMNS,
    }
    written = {name: csv_header(fixture / "run" / name) for name in files}
    written[schema.RUN_FILE] = list(json.loads((fixture / "run" / schema.RUN_FILE).read_text()))
    today = {**files, schema.RUN_FILE: schema.RUN_KEYS}
    summary = json.loads((fixture / schema.SUMMARY_JSON).read_text())
    written["summary.json levels"] = sorted(summary["levels"][0])
    today["summary.json levels"] = sorted(todays_summary(fixture, tmp_path)["levels"][0])
    written["summary.json"] = sorted(summary)
    today["summary.json"] = sorted(todays_summary(fixture, tmp_path))
    written["results store"] = sorted(f"{t}.{c}" for t, cs in store_columns(fixture / "store.db").items() for c in cs)
    store.connect(tmp_path / "today.db").close()
    today["results store"] = sorted(f"{t}.{c}" for t, cs in store_columns(tmp_path / "today.db").items() for c in cs)
    return [
        f"{name}: today's {sorted(set(today[name]) ^ set(written[name]))} differ from {fixture.name}'s: add format "
        f"{FORMAT_VERSION + 1} and its fixture (docs/concepts/formats.md)"
        for name in today
        if today[name] != written[name]
    ]


def todays_summary(fixture: Path, tmp_path: Path) -> dict:
    out = tmp_path / "today-report"
    return json.loads((out / schema.SUMMARY_JSON).read_text()) if out.is_dir() else analyse(fixture / "run", out)


def test_every_format_has_its_fixture_and_is_recognised():
    assert VERSIONS == list(range(1, FORMAT_VERSION + 1))
    for version in VERSIONS:
        assert load_run(run_of(version)).format_version == version
        assert json.loads((FIXTURES / f"v{version}" / schema.SUMMARY_JSON).read_text())["levels"]
    assert json.loads((run_of(FORMAT_VERSION) / schema.RUN_FILE).read_text())[schema.FORMAT_KEY] == FORMAT_VERSION


def test_todays_schema_is_the_newest_fixtures(tmp_path):
    assert schema_drift(TODAY, tmp_path) == []


def test_a_schema_change_without_a_new_format_fails(tmp_path, monkeypatch):
    monkeypatch.setattr(schema, "REQUEST_COLUMNS", [*schema.REQUEST_COLUMNS, "unplanned_tokens"])
    monkeypatch.setattr(store, "SCHEMA", store.SCHEMA.replace("verdicts TEXT,", "verdicts TEXT, cost REAL,"))
    drift = schema_drift(TODAY, tmp_path)
    assert [line.split(":")[0] for line in drift] == [schema.REQUESTS_FILE, "results store"]
    assert "['unplanned_tokens']" in drift[0] and f"add format {FORMAT_VERSION + 1} and its fixture" in drift[0]
    assert "['runs.cost']" in drift[1]


def test_a_summary_field_without_a_new_format_fails(tmp_path):
    fixture = shutil.copytree(TODAY, tmp_path / "fixture")
    summary = json.loads((fixture / schema.SUMMARY_JSON).read_text())
    for level in summary["levels"]:
        del level["prefix_hit_rate"]
    (fixture / schema.SUMMARY_JSON).write_text(json.dumps(summary))
    (line,) = schema_drift(fixture, tmp_path)
    assert line.startswith("summary.json levels: today's ['prefix_hit_rate'] differ from fixture's")


@pytest.mark.parametrize("version", VERSIONS)
def test_each_format_is_analysed_with_both_levels(version, tmp_path, capsys):
    code, out, err = run_cli(capsys, run_of(version), "--out", tmp_path)
    assert code == 0, err
    summary = json.loads((tmp_path / schema.SUMMARY_JSON).read_text())
    assert summary[schema.FORMAT_KEY] == FORMAT_VERSION
    assert [level["users"] for level in summary["levels"]] == [2, 4]
    rows = len(load_run(run_of(version)).requests)
    assert sum(level["requests"] for level in summary["levels"]) <= rows
    earlier = summary["earlier_formats"]
    report = (tmp_path / schema.REPORT_MD).read_text()
    if version == FORMAT_VERSION:
        assert earlier == [] and "written by an earlier release" not in report
        assert summary["kv_cache"]["num_gpu_blocks"] > 0 and "no KV-cache ceiling" not in report
        assert all(level["gpu_power_w"] == pytest.approx(1050.75) for level in summary["levels"])  # tests/gpuexporter
    else:
        assert [run["format_version"] for run in earlier] == [version]
        assert "Runs written by an earlier release" in report
        assert earlier[0]["not_computed"][-1] == (
            "no per-model canary comparison, prefix-cache hit rate against its target, client cancellations, "
            "embeddings and rerank inputs per second, recorded sessions, connection churn, hit rate by KV tier, server "
            "memory drift, client memory drift, microbursts, the server's prefill time of long contexts, engine steps, "
            "the KV connector's own hit rate, working-set sweep, video tokens and bytes per request, audio seconds "
            "per second, prompt tokens by source and tier, KV block lifetimes: written before 2026-11-28"
        )
    if version < 4:
        assert earlier[0]["not_computed"][-2] == (
            "no image tokens and bytes per request, per-request server spans, client read-behind time, replica set "
            "over time, per-adapter latency and throughput, LoRA slots and deferred requests, server spec-decode "
            "acceptance, per-class report, structured-output validity: written before 2026-11-25"
        )
    if version < 3:
        assert earlier[0]["not_computed"][-3] == (
            "no KV-cache ceiling, GPU power and energy, time to first answer token, reasoning share: "
            "written before 2026-11-25"
        )
        assert "no GPU telemetry: written before 2026-11-25" in report
        assert summary["kv_cache"] is None and "no KV-cache ceiling: written before 2026-11-25" in report
    if version == 1:
        line = earlier[0]["not_computed"][0]
        assert line.startswith("no schedule lag,") and line.endswith(": written before 2026-11-23")
        assert f"(format 1, released {FORMATS[0].released})" in report


@pytest.mark.parametrize("version", VERSIONS[:-1])
def test_an_earlier_release_run_compared_with_todays(version, capsys):
    code, out, err = run_cli(capsys, "compare", run_of(version), run_of(FORMAT_VERSION))
    assert code == 0, err  # no --fail-on: nothing can regress
    assert "compared 2 level(s): 0 regression(s)" in out


def test_a_store_from_before_formats_opens_upgraded_with_a_backup(tmp_path, capsys):
    db = tmp_path / "results.db"
    shutil.copy(FIXTURES / "v2" / "store.db", db)
    before = store_columns(db)
    code, out, err = run_cli(capsys, "history", "--db", db)
    assert code == 0, err
    assert out.splitlines()[1].startswith("db:1\t")
    backup = tmp_path / "results.db.format-2.bak"
    assert f"from format 2 to {FORMAT_VERSION} (backup: {backup})" in err
    with sqlite3.connect(backup) as old, sqlite3.connect(db) as new:
        assert old.execute("PRAGMA user_version").fetchone() == (0,)
        assert new.execute("PRAGMA user_version").fetchone() == (FORMAT_VERSION,)
        assert new.execute("SELECT id, format_version FROM runs").fetchall() == [(1, 2)]
        assert (
            new.execute("SELECT fields FROM levels").fetchall() == old.execute("SELECT fields FROM levels").fetchall()
        )
    assert store_columns(backup) == before
    code, out, err = run_cli(capsys, "compare", "db:1", run_of(FORMAT_VERSION), "--db", db)
    assert code == 0 and "compared 2 level(s): 0 regression(s)" in out and "upgraded" not in err  # upgraded once
    code, out, err = run_cli(capsys, run_of(1), "--out", tmp_path / "report", "--db", db)
    assert code == 0 and "db:2" in out
    with sqlite3.connect(db) as new:
        assert new.execute("SELECT format_version FROM runs WHERE id = 2").fetchone() == (1,)


def test_a_store_of_todays_format_is_not_touched(tmp_path, capsys):
    db = tmp_path / "results.db"
    shutil.copy(FIXTURES / f"v{FORMAT_VERSION}" / "store.db", db)
    code, out, err = run_cli(capsys, "history", "--db", db)
    assert code == 0 and "upgraded" not in err
    assert [path.name for path in tmp_path.iterdir()] == ["results.db"]


def test_newer_formats_are_refused_in_one_line(tmp_path, capsys):
    run = shutil.copytree(run_of(FORMAT_VERSION), tmp_path / "run")
    meta = json.loads((run / schema.RUN_FILE).read_text())
    (run / schema.RUN_FILE).write_text(json.dumps(meta | {schema.FORMAT_KEY: FORMAT_VERSION + 1}))
    code, out, err = run_cli(capsys, run, "--out", tmp_path / "report")
    newer = f"format {FORMAT_VERSION + 1} is newer than this vllm-stress reads (formats 1 to {FORMAT_VERSION})"
    assert code == 2 and err == f"error: {run / schema.RUN_FILE}: {newer}: update vllm-stress\n"
    db = tmp_path / "results.db"
    shutil.copy(FIXTURES / f"v{FORMAT_VERSION}" / "store.db", db)
    with sqlite3.connect(db) as connection:
        connection.execute(f"PRAGMA user_version = {FORMAT_VERSION + 1}")
    code, out, err = run_cli(capsys, "history", "--db", db)
    assert code == 2 and err == f"error: {db}: results store {newer}: update vllm-stress\n"
