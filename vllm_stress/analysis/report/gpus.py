"""The report's "GPU power and energy" section: per level, the GPUs' power, utilisation and energy per output token
from gpu_metrics.csv (docs/concepts/analysis.md, "Capacity planning")."""

from __future__ import annotations

from collections.abc import Mapping

from vllm_stress.analysis.report.render import Block, Bullets, Heading, Paragraph, Table
from vllm_stress.analysis.summary import ConfigSummary
from vllm_stress.core.formats import added_in
from vllm_stress.core.numbers import count
from vllm_stress.core.schema import GPU_METRICS_FILE

GPU_HEADING = "GPU power and energy"
GPU_NOTE = (
    "Power: each GPU's mean over the scrapes of its exporter in the level's window, summed over the GPUs. "
    "Utilisation: their mean (the share of time a kernel ran). J per output token: power / output tok/s."
)


def gpu_blocks(configs: Mapping[str, ConfigSummary]) -> list[Block]:
    """Per level of each config with GPU telemetry its power, utilisation and energy per token; a line per config
    without any saying why."""
    rows = [
        [
            label,
            str(level["users"]),
            count(level["gpu_power_w"]),
            count(level["gpu_utilization_percent"], 1),
            count(level["gpu_joules_per_output_token"], 3),
        ]
        for label, config in configs.items()
        for level in config["levels"]
        if level.get("gpu_power_w") is not None
    ]
    missing = [f"{label}: {no_telemetry_reason(config)}" for label, config in configs.items() if not has_power(config)]
    table = [Table(["Config", "Users", "GPU power (W)", "Utilisation (%)", "J per output token"], rows)] if rows else []
    return [Heading(GPU_HEADING), *table, *([Bullets(missing)] if missing else []), Paragraph(GPU_NOTE)]


def has_power(config: ConfigSummary) -> bool:
    return any(level.get("gpu_power_w") is not None for level in config["levels"])


def no_telemetry_reason(config: ConfigSummary) -> str:
    """Why a config has no GPU power: its runs' format, or no exporter given."""
    if config["earlier_formats"] and len(config["earlier_formats"]) == config["runs"]:
        return f"no GPU telemetry: written before {added_in(GPU_METRICS_FILE, 'power_w').released}"
    return f"no GPU telemetry: no {GPU_METRICS_FILE} (the run was not given --gpu-metrics-url)"
