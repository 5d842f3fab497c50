"""What an OpenAI-compatible server serves, from its ``GET /v1/models`` (vLLM lists each model with its
``max_model_len``): one reader for the load generator's target check, the scenario runner's readiness poll and the
parallel-query runner."""

from __future__ import annotations

import requests


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
