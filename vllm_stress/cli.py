"""``vllm-stress``: one command for the suite's tools, the same as their ``python -m`` forms.

vllm-stress run --scenario demo ...        python -m scenarios run ...
vllm-stress list                           python -m scenarios list
vllm-stress search --slo ttft_p99=2000 ... python -m scenarios search ...
vllm-stress parallel --dataset FILE ...    python -m scenarios parallel ...
vllm-stress analyse DIR --out OUT ...      python -m analysis DIR --out OUT ...
vllm-stress analyse compare BASE CAND ...  python -m analysis compare BASE CAND ... (and analyse history)
vllm-stress simulate --profile NAME ...    python -m simulator ...
vllm-stress locustfile [NAME]              the path of a user class's locustfile (chat, session, sdk, ...) or of the
                                           ramp shape (shape), for ``locust -f``
"""

from __future__ import annotations

import sys
from pathlib import Path

SCENARIO_COMMANDS = ("run", "list", "search", "parallel", "plan")


def locustfile(name: str = "chat") -> Path:
    """The file of a user class (``vllm_stress/users/NAME.py``) or of the ramp shape ("shape")."""
    if name == "shape":
        from vllm_stress.scenarios.runner import SHAPE

        return SHAPE
    from vllm_stress import users

    try:
        return users.locustfile(name)
    except ValueError as error:
        raise SystemExit(f"error: {error} or shape") from None


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    command, rest = (args[0], args[1:]) if args else ("", [])
    if command in SCENARIO_COMMANDS:
        from vllm_stress.scenarios.cli import main as scenarios_main

        return scenarios_main([command, *rest])
    if command in ("analyse", "analyze"):
        from vllm_stress.analysis.cli import main as analysis_main

        return analysis_main(rest)
    if command == "simulate":
        from vllm_stress.simulator.cli import main as simulator_main

        return simulator_main(rest)
    if command == "locustfile":
        print(locustfile(*rest[:1]))
        return 0
    print(__doc__.strip(), file=sys.stderr if command not in ("-h", "--help") else sys.stdout)
    return 0 if command in ("-h", "--help") else 2
