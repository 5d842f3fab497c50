"""The registry of the suite's capabilities: one entry per thing a run can do beyond the plain profile, in the
order the options, the web UI's form, the report and the docs show them.

Each layer keeps its own part of a capability in a module named after the entry's ``name`` (the options in
``vllm_stress.client.features``, the per-level fields, summary and report blocks in ``vllm_stress.analysis.features``,
the web UI's group from the options), and reads this list to find them: adding a capability adds its modules and
one line here, and edits no layer's code. docs/contributing.md says where each module goes.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Capability:
    name: str  # the modules' name in every layer (a Python identifier)
    title: str  # the option group's, the form group's and the report section's title
    doc: str  # its page under docs/, for the help text and the form's group


CAPABILITIES: tuple[Capability, ...] = (
    Capability("profile", "Load profile", "first-run.md"),
    Capability("prefix", "Prefix caching", "concepts/prefix-hit-rate.md"),
    Capability("workingset", "Working-set sweep", "concepts/kv-tiers.md"),
    Capability("kvsources", "KV tiers: prompt tokens by source, block lifetimes", "concepts/kv-tiers.md"),
    Capability("longcontext", "Long contexts: prefill", "concepts/long-context.md"),
    Capability("dataset", "Datasets", "guides/sessions-and-traces.md"),
    Capability("classes", "Traffic classes", "guides/traffic-classes.md"),
    Capability("lora", "LoRA adapters", "guides/lora.md"),
    Capability("sessions", "Sessions and routers", "guides/sessions-and-traces.md"),
    Capability("traces", "Trace replay and arrivals", "guides/sessions-and-traces.md"),
    Capability("stress", "Stress: cancellations and bursts", "guides/stress.md"),
    Capability("soak", "Soak: drift over a long run", "guides/stress.md"),
    Capability("agents", "Agent tasks", "guides/agents.md"),
    Capability("structured", "Structured outputs", "guides/structured-outputs.md"),
    Capability("reasoning", "Reasoning models", "concepts/metrics.md"),
    Capability("images", "Images (vision models)", "concepts/metrics.md"),
    Capability("video", "Video (vision models)", "concepts/load-generator.md"),
    Capability("pooling", "Embeddings and rerank", "guides/endpoints.md"),
    Capability("audio", "Audio: transcription and translation", "guides/endpoints.md"),
    Capability("endpoints", "Peak and saturation per endpoint", "guides/endpoints.md"),
    Capability("canaries", "Correctness canaries", "guides/reading-the-report.md"),
    Capability("specdecode", "Speculative decoding", "guides/speculative-decoding.md"),
    Capability("pd", "Prefill/decode disaggregation", "guides/disaggregated.md"),
    Capability("fleet", "Fleets and replicas", "guides/fleets.md"),
    Capability("scaling", "Elastic fleets", "guides/elastic-fleets.md"),
    Capability("telemetry", "Server metrics and traces", "guides/prometheus-grafana.md"),
    Capability("connection", "Connection", "concepts/load-generator.md"),
    Capability("output", "Results", "reference/run-folder.md"),
)


def capability(name: str) -> Capability:
    """The entry called ``name``; a KeyError naming the known ones."""
    for entry in CAPABILITIES:
        if entry.name == name:
            return entry
    raise KeyError(f"no capability {name!r}: one of {', '.join(c.name for c in CAPABILITIES)}")
