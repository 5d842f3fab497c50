"""Each test file's time from a pytest JUnit XML report, for benchmarks/tests.md: per file, its tests, the seconds they
took (setup, call and teardown: what the test process spent on the file) and its slowest test, longest file first.

PYTHONPATH=$PWD .venv/bin/python -m pytest -n 3 --dist loadgroup --no-loadscope-reorder --junitxml=/tmp/tests.xml
.venv/bin/python -m benchmarks.test_times /tmp/tests.xml [--top 40]
"""

from __future__ import annotations

import argparse
import xml.etree.ElementTree as ElementTree
from collections import defaultdict


def file_times(report: str) -> list[tuple[str, int, float, str, float]]:
    """(file, tests, seconds, slowest test, its seconds) per test file, longest first."""
    tests: dict[str, list[tuple[float, str]]] = defaultdict(list)
    for case in ElementTree.parse(report).iter("testcase"):
        path = case.get("classname", "").replace(".", "/") + ".py"
        tests[path].append((float(case.get("time", 0)), case.get("name", "")))
    rows = []
    for path, timed in tests.items():
        slowest_s, slowest = max(timed)
        rows.append((path, len(timed), sum(seconds for seconds, _ in timed), slowest, slowest_s))
    return sorted(rows, key=lambda row: -row[2])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("report", help="pytest --junitxml file")
    parser.add_argument("--top", type=int, default=0, help="only the longest N files (default: all)")
    args = parser.parse_args()
    rows = file_times(args.report)
    print("| file | tests | s | slowest test (s) |\n|---|---|---|---|")
    for path, count, seconds, slowest, slowest_s in rows[: args.top or None]:
        print(f"| {path} | {count} | {seconds:.0f} | {slowest} ({slowest_s:.0f}) |")
    print(f"\n{len(rows)} files, {sum(row[1] for row in rows)} tests, {sum(row[2] for row in rows):.0f} s in all")


if __name__ == "__main__":
    main()
