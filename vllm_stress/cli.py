"""``vllm-stress``: one command for the suite's tools, the same as their ``python -m`` forms.

    vllm-stress run --scenario demo ...        python -m scenarios run ...
    vllm-stress list                           python -m scenarios list
    vllm-stress search --slo ttft_p99=2000 ... python -m scenarios search ...
    vllm-stress parallel --dataset FILE ...    python -m scenarios parallel ...
    vllm-stress analyse DIR --out OUT ...      python -m analysis DIR --out OUT ...
    vllm-stress analyse compare BASE CAND ...  python -m analysis compare BASE CAND ... (and analyse history)
    vllm-stress simulate --profile NAME ...    python -m simulator ...
    vllm-stress locustfile [NAME]              the path of a user class's locustfile (chat, sdk, ...) or of the
                                               ramp shape (shape), for ``locust -f``
"""

from __future__ import annotations

import sys
from pathlib import Path

SCENARIO_COMMANDS = ("run", "list", "search", "parallel")


def locustfile(name: str = "chat") -> Path:
    """The file of a user class (locustfiles/NAME.py) or of the ramp shape ("shape")."""
    if name == "shape":
        import scenarios

        return Path(scenarios.__file__).parent / "shape.py"
    import locustfiles

    path = Path(locustfiles.__file__).parent / f"{name}.py"
    if not path.is_file():
        raise SystemExit(f"error: no locustfile {name!r} (chat, completions, generate, sdk or shape)")
    return path


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    command, rest = (args[0], args[1:]) if args else ("", [])
    if command in SCENARIO_COMMANDS:
        from scenarios.__main__ import main as scenarios_main

        return scenarios_main([command, *rest])
    if command in ("analyse", "analyze"):
        from analysis.__main__ import main as analysis_main

        return analysis_main(rest)
    if command == "simulate":
        from simulator.__main__ import main as simulator_main

        return simulator_main(rest)
    if command == "locustfile":
        print(locustfile(*rest[:1]))
        return 0
    print(__doc__.strip(), file=sys.stderr if command not in ("-h", "--help") else sys.stdout)
    return 0 if command in ("-h", "--help") else 2


if __name__ == "__main__":
    sys.exit(main())
