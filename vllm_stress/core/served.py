"""What an OpenAI-compatible server serves, from its ``GET /v1/models`` (vLLM lists each model with its
``max_model_len``): one reader for the load generator's target check, the scenario runner's readiness poll and the
parallel-query runner; and its KV cache's shape from its ``/metrics`` (vLLM's ``vllm:cache_config_info``)."""

from __future__ import annotations

import requests
from prometheus_client.parser import text_string_to_metric_families

CACHE_CONFIG_INFO = "vllm:cache_config_info"  # vLLM's info gauge of its CacheConfig: the labels carry the values
CACHE_CONFIG_LABELS = ("block_size", "num_gpu_blocks")  # run.json server_cache_config keeps these


def models(
    base_url: str,
    headers: dict[str, str],
    timeout: float,
    verify: bool = True,
    session: requests.Session | None = None,
) -> dict[str, int | None]:
    """{model id: max_model_len or None} served at ``base_url``. Raises ``requests.RequestException`` when the server
    cannot be reached or answers an HTTP error (``requests.HTTPError`` carries the response), ``ValueError`` when the
    answer is not a model list. ``session``: the one to ask with (its source address), else requests' own."""
    url = base_url.rstrip("/") + "/v1/models"
    resp = (session.get if session is not None else requests.get)(url, headers=headers, timeout=timeout, verify=verify)
    resp.raise_for_status()
    try:
        return {card["id"]: card.get("max_model_len") for card in resp.json()["data"]}
    except (KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"not a model list ({type(e).__name__}: {e})") from None


def cache_config(text: str) -> dict[str, int] | None:
    """``block_size`` and ``num_gpu_blocks`` from the labels of vLLM's ``vllm:cache_config_info`` gauge in a
    Prometheus text exposition (each engine's sample carries the frontend's CacheConfig, whose num_gpu_blocks sums
    the data-parallel engines'), or None when the server exports no such gauge or a label is not a number (vLLM
    writes "None" before its KV cache is sized)."""
    lines = "\n".join(line for line in text.splitlines() if line.startswith(CACHE_CONFIG_INFO + "{"))
    for family in text_string_to_metric_families(lines):
        for sample in family.samples:
            values = [sample.labels.get(label, "") for label in CACHE_CONFIG_LABELS]
            if all(value.isdigit() for value in values):
                return dict(zip(CACHE_CONFIG_LABELS, map(int, values), strict=True))
    return None


def kv_block_size(base_url: str, headers: dict[str, str], timeout: float, verify: bool = True) -> int | None:
    """Tokens of one KV block of the server at ``base_url``, from its ``/metrics``; None when it cannot be read or
    exports no ``vllm:cache_config_info`` with a block size."""
    try:
        resp = requests.get(base_url.rstrip("/") + "/metrics", headers=headers, timeout=timeout, verify=verify)
        resp.raise_for_status()
    except requests.RequestException:
        return None
    config = cache_config(resp.text)
    return None if config is None else config["block_size"]
