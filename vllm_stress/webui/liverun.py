"""What the web UI reads of the run of a master or local runner."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vllm_stress.master.clienthealth import ClientHealth
    from vllm_stress.master.promexport import PromExport
    from vllm_stress.master.runrecorder import LocalRecorder
    from vllm_stress.master.servermetrics import ServerMetrics
    from vllm_stress.webui.progress import RampProgress


@dataclass(frozen=True)
class LiveRun:
    recorder: LocalRecorder
    server_metrics: ServerMetrics
    client_health: ClientHealth
    progress: RampProgress
    metrics: PromExport
