"""Several replicas named in --host, without a router: how requests are spread over them."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vllm_stress.client.features import OptionGroup


def add_arguments(group: OptionGroup) -> None:
    group.add_argument(
        "--replica-spread",
        choices=("request", "user"),
        default="request",
        help="With -H naming several replicas, comma-separated (http://a:8000,http://b:8000; no router): round "
        "robin per request, or each user on one replica (sticky); test-start probes go to the first",
    )
