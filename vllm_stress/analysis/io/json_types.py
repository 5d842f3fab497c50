"""JSON values: the type of what ``json`` reads and writes, and the conversion of analysis results (numpy scalars,
NaN) into it for summary.json, compare.json, the results store and the vLLM export."""

from __future__ import annotations

import math

import numpy as np

Json = dict[str, "Json"] | list["Json"] | str | int | float | bool | None


def to_json_types(value: object) -> Json:
    """Plain Python types for json: numpy scalars unwrapped, tuples as lists, NaN and infinities as None, keys as
    text (TypeError for anything else JSON cannot hold)."""
    if isinstance(value, dict):
        return {str(k): to_json_types(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json_types(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, str | int | float | bool):
        return value
    raise TypeError(f"not a JSON value: {value!r}")
