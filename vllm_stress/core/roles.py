"""A replica's role in a disaggregated prefill/decode fleet, as ``--server-metrics-url ROLE=URL`` names it: ``prefill``
(vLLM's kv_producer), ``decode`` (kv_consumer) or ``both`` (kv_both, or an ordinary replica); a URL alone is ``both``.
run.json keeps each named replica's role under ``replica_roles`` (host:port -> role)."""

from __future__ import annotations

import re

ROLES = ("prefill", "decode", "both")
DEFAULT_ROLE = "both"
_ROLE_PREFIX = re.compile(rf"^\s*({'|'.join(ROLES)})\s*=\s*(\S+)\s*$")


def split_role(value: str) -> tuple[str, str]:
    """'prefill=http://p:8000/metrics' -> ("prefill", "http://p:8000/metrics"); a URL alone -> ("both", URL)."""
    match = _ROLE_PREFIX.match(value)
    return (match[1], match[2]) if match else (DEFAULT_ROLE, value.strip())
