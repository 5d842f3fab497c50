"""GPU telemetry: the DCGM and AMD exporters' names read into gpu_metrics.csv, and per level the GPUs' power, utilisation
and energy per output token, through a smoke run against a stand-in exporter with known values (tests/gpuexporter.py)."""

import json

import pandas as pd
import pytest

from tests import gpuexporter
from tests.helpers import analyse, small_run
from vllm_stress.core import schema
from vllm_stress.core.formats import FORMAT_VERSION
from vllm_stress.master.gpuscraper import GpuScraper, gpu_values


def test_each_exporters_names_per_gpu():
    assert gpu_values(gpuexporter.DCGM) == {
        "0": {"power_w": 250.5, "utilization_percent": 80.0, "memory_used_mib": 70000.0},
        "1": {"power_w": 300.25, "utilization_percent": 90.0, "memory_used_mib": 71000.0},
    }
    assert gpu_values(gpuexporter.AMD) == {  # package power first, whatever the order of the samples
        "0": {"power_w": 500.0, "utilization_percent": 70.0, "memory_used_mib": 150000.0}
    }
    assert gpu_values('vllm:num_requests_running{engine="0"} 1.0\n') == {}


def test_the_scraper_writes_a_row_per_gpu_and_none_when_unreachable():
    server = gpuexporter.start()
    try:
        dcgm, amd = gpuexporter.urls(server)
        rows = GpuScraper(dcgm).scrape(users=4) + GpuScraper(amd).scrape(users=4)
        assert [row[1:] for row in rows] == [
            [4, dcgm, "0", 250.5, 80, 70000],
            [4, dcgm, "1", 300.25, 90, 71000],
            [4, amd, "0", 500, 70, 150000],
        ]
        assert len(rows[0]) == len(schema.GPU_METRICS_COLUMNS)
    finally:
        server.shutdown()
    assert GpuScraper(dcgm).scrape(users=4) == []


def test_without_telemetry_the_fields_are_empty_and_the_report_says_why(tmp_path):
    earlier = analyse(small_run(tmp_path / "v2"), tmp_path / "v2-report")  # no format_version: format 2
    assert all(level["gpu_power_w"] is None and level["gpu_joules_per_output_token"] is None for level in
               earlier["levels"])  # fmt: skip
    assert "- m: no GPU telemetry: written before 2026-11-25" in (tmp_path / "v2-report" / "report.md").read_text()
    run = small_run(tmp_path / "v3")
    meta = json.loads((run / schema.RUN_FILE).read_text()) | {schema.FORMAT_KEY: FORMAT_VERSION}
    (run / schema.RUN_FILE).write_text(json.dumps(meta))
    analyse(run, tmp_path / "v3-report")
    report = (tmp_path / "v3-report" / "report.md").read_text()
    assert "- m: no GPU telemetry: no gpu_metrics.csv (the run was not given --gpu-metrics-url)" in report


def test_a_smoke_run_measures_the_gpus_power_and_energy_per_token(scenarios, tmp_path):
    server = gpuexporter.start()
    try:
        out = tmp_path / "smoke"
        urls = [f"--locust-arg=--gpu-metrics-url={url}" for url in gpuexporter.urls(server)]
        assert scenarios(["run", "--scenario", "smoke", "--out", str(out), "--workers", "1", *urls]) == 0
    finally:
        server.shutdown()
    scrapes = pd.read_csv(out / "run-1" / schema.GPU_METRICS_FILE)
    assert list(scrapes.columns) == schema.GPU_METRICS_COLUMNS and set(scrapes["gpu"]) == {0, 1}
    summary = json.loads((out / "report" / "summary.json").read_text())
    for level in summary["levels"]:
        assert level["gpu_power_w"] == pytest.approx(gpuexporter.POWER_W)  # 1,050.75 W
        assert level["gpu_utilization_percent"] == pytest.approx(gpuexporter.UTILIZATION_PERCENT)  # 80 %
        # joules = watts x seconds: the exporters' known draw over the level's tokens per second
        assert level["gpu_joules_per_output_token"] * level["output_tokens_per_s"] == pytest.approx(1050.75)
    report = (out / "report" / "report.md").read_text()
    assert "## GPU power and energy" in report and "| 1,051 | 80.0 |" in report
