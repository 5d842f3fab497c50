"""Each test file's time from a pytest JUnit XML report, for benchmarks/tests.md: per file, its tests, the seconds they
took (setup, call and teardown: what the test process spent on the file) and its slowest test, longest file first.
With --write, the seconds per file also go to the table that tests/conftest.py orders the files by (FILE_SECONDS).

make test PYTEST_ARGS=--junitxml=/tmp/tests.xml
.venv/bin/python -m benchmarks.test_times /tmp/tests.xml [more runs' reports] [--top 40] [--write tests/file_seconds.json]
"""

from __future__ import annotations

import argparse
import json
import xml.etree.ElementTree as ElementTree
from collections import defaultdict


def file_times(reports: list[str]) -> list[tuple[str, int, float, str, float]]:
    """(file, tests, seconds, slowest test, its seconds) per test file, longest first: the mean over ``reports``
    (runs of the same suite) of each file's tests and seconds, and its slowest test in any of them."""
    tests: dict[str, list[tuple[float, str]]] = defaultdict(list)
    for report in reports:
        for case in ElementTree.parse(report).iter("testcase"):
            path = case.get("classname", "").replace(".", "/") + ".py"
            tests[path].append((float(case.get("time", 0)), case.get("name", "")))
    rows = []
    for path, timed in tests.items():
        slowest_s, slowest = max(timed)
        seconds = sum(seconds for seconds, _ in timed) / len(reports)
        rows.append((path, len(timed) // len(reports), seconds, slowest, slowest_s))
    return sorted(rows, key=lambda row: -row[2])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("reports", nargs="+", help="pytest --junitxml files of runs of the same suite (the mean)")
    parser.add_argument("--top", type=int, default=0, help="only the longest N files (default: all)")
    parser.add_argument("--write", metavar="JSON", help="also write {file: seconds} there, longest first")
    args = parser.parse_args()
    rows = file_times(args.reports)
    if args.write:
        with open(args.write, "w") as table:
            json.dump({path: round(seconds) for path, _, seconds, _, _ in rows}, table, indent=0)
            table.write("\n")
    print("| file | tests | s | slowest test (s) |\n|---|---|---|---|")
    for path, count, seconds, slowest, slowest_s in rows[: args.top or None]:
        print(f"| {path} | {count} | {seconds:.0f} | {slowest} ({slowest_s:.0f}) |")
    print(f"\n{len(rows)} files, {sum(row[1] for row in rows)} tests, {sum(row[2] for row in rows):.0f} s in all")


if __name__ == "__main__":
    main()
