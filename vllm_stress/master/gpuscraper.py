"""One scrape of a GPU exporter's Prometheus ``/metrics`` — NVIDIA's DCGM exporter or AMD's device-metrics-exporter —
turned into ``gpu_metrics.csv`` rows, one per GPU (no Locust import)."""

from __future__ import annotations

import time
from collections import defaultdict

import requests
from prometheus_client.parser import text_string_to_metric_families

from vllm_stress.core import schema
from vllm_stress.master.serverscraper import Cell, Exporter, cell

_COLUMNS = {name: column for column, names in schema.GPU_SAMPLES.items() for name in names}  # sample -> column
_LINE_STARTS = tuple(name + end for name in _COLUMNS for end in ("{", " "))


def gpu_values(text: str) -> dict[str, dict[str, float]]:
    """{GPU: {column: value}} of a Prometheus text exposition: per column, the first of its samples (in
    schema.GPU_SAMPLES' order) that the GPU has; raises ValueError when it is not an exposition."""
    found: dict[str, dict[str, tuple[int, float]]] = defaultdict(dict)
    wanted = "\n".join(line for line in text.splitlines() if line.startswith(_LINE_STARTS))
    for family in text_string_to_metric_families(wanted):
        for sample in family.samples:
            gpu = next((sample.labels[label] for label in schema.GPU_LABELS if label in sample.labels), "")
            column = _COLUMNS[sample.name]
            rank = schema.GPU_SAMPLES[column].index(sample.name)
            if rank < found[gpu].get(column, (len(_COLUMNS), 0.0))[0]:
                found[gpu][column] = (rank, sample.value)
    return {gpu: {column: value for column, (_, value) in columns.items()} for gpu, columns in found.items()}


class GpuScraper(Exporter):
    """Scrapes one GPU exporter; ``scrape(users)`` returns its ``gpu_metrics.csv`` rows ([] while it cannot)."""

    def scrape(self, users: int) -> list[list[Cell]]:
        try:
            values = gpu_values(self.text())
        except (requests.RequestException, ValueError) as e:
            self.warn_once(
                "unreachable", "Cannot scrape %s (%s): no gpu_metrics.csv rows while this lasts", self.url, e
            )
            return []
        if not values:
            self.warn_once("foreign", "%s has none of the DCGM or AMD exporters' GPU metrics: no rows", self.url)
            return []
        now = round(time.time(), 3)
        return [
            [now, users, self.url, gpu, *(cell(columns.get(column)) for column in schema.GPU_SAMPLES)]
            for gpu, columns in sorted(values.items())
        ]
