"""What an SLO search varies and the range it may probe (vllm_stress/scenarios/search/space.py)."""

from __future__ import annotations

import pytest

from vllm_stress.scenarios.run.errors import ScenarioError
from vllm_stress.scenarios.search.space import DEFAULT_POOL_SECONDS, Space, check_space


def test_over_users_a_load_is_a_number_of_users():
    space = Space("users", 1, 64, 0.1)
    assert space.whole and space.users_for(48) == 48
    assert space.folder(48) == "probe-48" and space.label(48) == "48 users"
    assert space.locust_args(48) == ["--levels=48"]


def test_over_rate_a_load_is_carried_by_a_pool_of_users():
    space = Space("rate", 1.0, 64.0, 0.1, pool_seconds=2.5)
    assert not space.whole
    assert space.users_for(2.0) == 5 and space.users_for(0.1) == 1  # ceil(rate x pool seconds), at least one
    assert space.folder(2.0) == "rate-2" and space.folder(1.5) == "rate-1.5"
    assert space.label(1.5) == "1.5 req/s (4 users)"
    assert space.locust_args(2.0) == ["--levels=5", "--arrival-rate=2"]


def test_the_defaults_of_each_kind_of_search():
    users = check_space("users", None, None, 0.1, DEFAULT_POOL_SECONDS)
    assert (users.low, users.high) == (1, 1024) and isinstance(users.low, int)
    rate = check_space("rate", None, None, 0.2, 4.0)
    assert (rate.low, rate.high, rate.precision, rate.pool_seconds) == (1.0, 512.0, 0.2, 4.0)
    assert check_space("users", 8.0, 128.0, 0.1, 10.0) == Space("users", 8, 128, 0.1, 10.0)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("tokens", None, None, 0.1, 10.0), "--over must be one of users, rate, got 'tokens'"),
        (("users", 1.5, 8, 0.1, 10.0), "--low and --high are whole users over users, got 1.5 and 8"),
        (("rate", 0.0, 8.0, 0.1, 10.0), "--low and --high must be 0 < low <= high, got 0 and 8"),
        (("rate", 9.0, 8.0, 0.1, 10.0), "0 < low <= high, got 9 and 8"),
        (("rate", 1.0, 8.0, 1.0, 10.0), "--precision must be between 0 and 1"),
        (("rate", 1.0, 8.0, 0.1, 0.0), "--pool-seconds above 0, got 0.1 and 0"),
    ],
)
def test_a_space_no_search_can_use_is_refused(args, message):
    with pytest.raises(ScenarioError, match=message):
        check_space(*args)
