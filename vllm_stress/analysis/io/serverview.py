"""The server's view of each request, from its OpenTelemetry spans (server_spans.csv): the spans joined to the rows
by trace id, each level's client TTFT split into the time before vLLM, the queue and the prefill (its table in the
report: ``document.split_blocks``) (docs/concepts/traces.md)."""

from __future__ import annotations

import pandas as pd

from vllm_stress.core.spans import trace_id_of

# row column -> server_spans.csv column: empty when no span of the request came
SERVER_VIEW_COLUMNS = {
    "server_queue_s": "queue_s",
    "server_ttft_s": "ttft_s",
    "server_prefill_s": "prefill_s",
    "server_decode_s": "decode_s",
    "server_e2e_s": "e2e_s",
}
# level field -> the per-row time whose p50/p99 it is; every one is defined in levels.LEVEL_FIELDS
TTFT_PARTS = {
    "ttft_before_server": "before_server_s",
    "ttft_queue": "server_queue_s",
    "ttft_prefill": "server_prefill_s",
}
SPLIT_PERCENTS = (50, 99)  # of each part


def with_server_view(rows: pd.DataFrame, spans: pd.DataFrame | None) -> tuple[pd.DataFrame, int | None]:
    """The rows with SERVER_VIEW_COLUMNS from the span of the same trace id (NaN where none came) and the client
    TTFT's part before vLLM, and how many spans joined no row (other clients'; None without server_spans.csv)."""
    trace_ids = rows["request_id"].fillna("").map(trace_id_of)
    if spans is None:
        view = rows.assign(**dict.fromkeys(SERVER_VIEW_COLUMNS, float("nan")))
        return view.assign(before_server_s=float("nan")), None
    by_trace = spans.drop_duplicates("trace_id", keep="last").set_index("trace_id")
    view = rows.assign(**{column: trace_ids.map(by_trace[source]) for column, source in SERVER_VIEW_COLUMNS.items()})
    view["before_server_s"] = view["ttft_s"] - view["server_ttft_s"]
    return view, int((~spans["trace_id"].isin(trace_ids)).sum())
