"""vLLM's LoRA and deferred-waiting gauges in one scrape of ``/metrics``, as ``server_metrics.csv``'s LoRA columns
(vllm_stress.core.schema.SERVER_LORA_COLUMNS). ``vllm:lora_requests_info`` is an info gauge whose labels carry the
adapters and whose value is the unix time they were last set (vllm/v1/metrics/loggers.py): the server keeps every
label set it ever set, so the current one is the sample with the newest time."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

LORA_INFO = "vllm:lora_requests_info"
WAITING_BY_REASON = "vllm:num_requests_waiting_by_reason"
_STARTS = (LORA_INFO + "{", WAITING_BY_REASON + "{")


def names(label: str) -> int:
    """Adapters in a comma-joined label."""
    return len([name for name in label.split(",") if name])


def lora_values(text: str) -> dict[str, float]:
    """``max_lora``, ``lora_running``, ``lora_waiting`` and ``waiting_deferred`` of a Prometheus text exposition,
    without those the server does not export (no LoRA, or a vLLM without the reason gauge)."""
    wanted = "\n".join(line for line in text.splitlines() if line.startswith(_STARTS))
    values: dict[str, float] = {}
    newest_time = -1.0
    for family in text_string_to_metric_families(wanted):
        for sample in family.samples:
            if sample.name == LORA_INFO and sample.value > newest_time:
                newest_time, labels = sample.value, sample.labels
                values["lora_running"] = names(labels.get("running_lora_adapters", ""))
                values["lora_waiting"] = names(labels.get("waiting_lora_adapters", ""))
                if labels.get("max_lora", "").isdigit():
                    values["max_lora"] = int(labels["max_lora"])
            elif sample.name == WAITING_BY_REASON and sample.labels.get("reason") == "deferred":
                values["waiting_deferred"] = values.get("waiting_deferred", 0.0) + sample.value
    return values
