"""The pooling users against a real vLLM (CPU build) serving the tiny model as an embedding model: each row's inputs
and tokens are what the server counted, and the report has their section (docs/guides/endpoints.md)."""

from __future__ import annotations

import pytest

from tests.helpers import NO_CANARIES, analyse, counters, delta, run_user
from vllm_stress.master.rows import QUERY_APIS

pytestmark = pytest.mark.timeout(600)  # the real_vllm_pooling fixture marks the tests realvllm

SHORT = ["--input-tokens", "64", "--headless", "--only-summary", "-L", "WARNING", *NO_CANARIES]
INPUTS = {
    "embeddings": ("--embedding-inputs", 4),
    "rerank": ("--rerank-documents", 5),
    "score": ("--rerank-documents", 5),
}


@pytest.mark.parametrize("locustfile", list(INPUTS))
def test_each_pooling_row_is_what_vllm_counted(run_locust, real_vllm_pooling, tmp_path, locustfile):
    """Every row a success of its inputs; the server's finished requests and prompt tokens gained in the run are the
    rows' (an embedding model runs each input, and a rerank or score request's query too, as a request of its own,
    and its usage counts the query once)."""
    option, inputs = INPUTS[locustfile]
    before = counters(real_vllm_pooling.url)
    rows = run_user(run_locust, real_vllm_pooling, tmp_path / "run", locustfile, *SHORT, option, str(inputs))
    assert rows, "no request finished"
    query = locustfile in QUERY_APIS
    for row in rows:
        assert (row["ok"], row["error"], row["name"], row["inputs"]) == ("1", "", locustfile, str(inputs)), row
        assert int(row["prompt_tokens"]) == 64 * (inputs + query) and row["completion_tokens"] == "0", row
    changed = delta(before, counters(real_vllm_pooling.url))
    finished = sum(value for key, value in changed.items() if key.startswith("vllm:request_success_total{"))
    assert finished == len(rows) * (inputs + query)
    assert changed["vllm:prompt_tokens_total{}"] == sum(int(row["prompt_tokens"]) for row in rows)
    assert "vllm:generation_tokens_total{}" not in changed  # a pooling request decodes nothing
    summary = analyse(tmp_path / "run", tmp_path / "report")
    (level,) = summary["levels"]
    assert level[f"{locustfile}_inputs_per_s"] == pytest.approx(inputs * level[f"{locustfile}_requests_per_s"])
    assert "Embeddings and rerank" in (tmp_path / "report" / "report.md").read_text()
