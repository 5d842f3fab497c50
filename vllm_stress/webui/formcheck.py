"""The web UI's start form checked before a run starts: a bad value of one of the suite's options is refused with the
same one-line error the command line gives, in the form's answer (Locust shows its message), instead of a run that
stops at once (or an HTTP 500 for a number that does not parse).

Locust's ``/swarm`` copies each form field onto ``parsed_options`` with the type of its current value; this does the
same on a copy, then runs the suite's checks (``vllm_stress.client.checks.validate``) and the load shape's
(``check_options``, e.g. ``vllm_stress.scenarios.shape.StepRampShape``). What needs the server (its models, max_model_len) is
checked when the run starts, as on the command line.
"""

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
