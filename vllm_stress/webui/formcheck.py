"""The web UI's start form, checked with the command line's rules before a run starts."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import TYPE_CHECKING

from vllm_stress.client.checks import StopTarget, validate

if TYPE_CHECKING:
    from locust.env import Environment

LOCUST_FIELDS = {"user_count", "spawn_rate", "host", "user_classes", "run_time", "profile", "shape_class"}


def form_error(environment: Environment, form: Mapping[str, str]) -> str:
    """The one-line error for ``form`` (the /swarm request's fields), or "" when the run can start."""
    if environment.parsed_options is None:
        return ""
    options = argparse.Namespace(**vars(environment.parsed_options))
    for key, value in form.items():
        current = getattr(options, key, None)
        if key in LOCUST_FIELDS or current is None or isinstance(current, (bool, list)):
            continue  # Locust's own fields, and values it copies without converting
        try:
            setattr(options, key, value if isinstance(current, str) else type(current)(value))
        except ValueError:
            return f"argument --{key.replace('_', '-')}: invalid {type(current).__name__} value: {value!r}"
    try:
        validate(options)
        if check_options := getattr(environment.shape_class, "check_options", None):
            check_options(options)
    except (StopTarget, ValueError) as error:
        return str(error)
    return ""
