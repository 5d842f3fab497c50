"""A worker reads each spawn message's options against Locust's defaults (runners.py, "spawn"): the suite builds
those defaults once per process, not once per option (users/plugin.py), so a ramp's message a second stays cheap."""

import pytest
from locust import argument_parser

from vllm_stress.users import plugin  # noqa: F401 (its import makes the change)


@pytest.mark.product_free
def test_the_defaults_are_built_once_and_stay_locusts():
    first = argument_parser.default_args_dict()
    assert argument_parser.default_args_dict() is first  # not built again
    assert first["num_users"] is None and first["master_port"] == 5557  # Locust's own defaults (-u, --master-port)
    assert "output_tokens" not in first  # the suite's options are the master's to send, not Locust's defaults
