#!/usr/bin/python3
"""Counts test cases, not meson tests, for tools/test-all's closing line.

usage: count_cases.py TESTLOG REPORTS [TESTLOG REPORTS ...] [--failed-stage NAME ...]

e.g. build/meson-logs/testlog.json build/test-reports build-asan/meson-logs/testlog.json
build-asan/test-reports: one pair per build tools/test-all ran tests in (the sanitized build's
suite is 'asan', so its cases are named asan/NAME). --failed-stage NAME counts one failure for a
step that ran no test (a build that did not compile).

Each meson test that writes a JUnit report (GoogleTest via GTEST_OUTPUT, pytest via
--junitxml; see tests/meson.build) contributes its cases; one that writes none (the fuzzers)
counts as one case. A meson test that failed although its report shows no failing case
(a crash after the last case, a timeout, a leak found at exit) adds one failure under its own
name, so nothing that failed is hidden. Failing and skipped cases are printed by name; the
last line is "N passed, N failed".
"""
import json
import os
import sys
import xml.etree.ElementTree as ET

PASSED_RESULTS = ("OK", "EXPECTEDFAIL")


def meson_tests(testlog):
    """(report file stem, display name, meson result) per meson test that ran."""
    try:
        lines = [line for line in open(testlog) if line.strip()]
    except OSError:
        return []
    tests = []
    for line in lines:
        entry = json.loads(line)
        # meson names a test "project:suiteA+suiteB / name".
        where, _, name = entry["name"].partition(" / ")
        suites = where.split(":", 1)[-1].split("+")
        suite = next((s for s in ("asan", "unit", "integration", "fuzz", "lint") if s in suites),
                     "test")
        tests.append((f"{suite}-{name}", f"{suite}/{name}", entry["result"]))
    return tests


def report_cases(path):
    """(case name, 'passed'|'failed'|'skipped') for every test case in a JUnit report."""
    cases = []
    for case in ET.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname', '')}.{case.get('name', '')}".lstrip(".")
        if case.find("failure") is not None or case.find("error") is not None:
            cases.append((name, "failed"))
        elif case.find("skipped") is not None or case.get("result") == "skipped":
            cases.append((name, "skipped"))
        else:
            cases.append((name, "passed"))
    return cases


def main(builds, failed_stages):
    passed, failed, failing, skipped = 0, 0, [], []
    tests = [(reports, *test) for testlog, reports in builds for test in meson_tests(testlog)]
    for reports, stem, display, result in tests:
        report = os.path.join(reports, stem + ".xml")
        try:
            cases = report_cases(report) if os.path.exists(report) else None
        except ET.ParseError:
            cases = None  # a report cut off by a crash: fall back to the meson result
        if cases is None:
            cases = [(display, "passed" if result in PASSED_RESULTS else "failed")]
        else:
            cases = [(f"{display}: {name}", state) for name, state in cases]
            if result not in PASSED_RESULTS and not any(s == "failed" for _, s in cases):
                cases.append((f"{display} ({result})", "failed"))
        for name, state in cases:
            if state == "passed":
                passed += 1
            elif state == "failed":
                failed += 1
                failing.append(name)
            else:
                skipped.append(name)
    if not tests:
        failed, failing = 1, ["no test ran (no meson-logs/testlog.json)"]
    for stage in failed_stages:
        failed += 1
        failing.append(f"stage: {stage}")
    for name in failing:
        print(f"FAILED  {name}")
    for name in skipped:
        print(f"skipped {name} (counted neither way)")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    args, stages = sys.argv[1:], []
    while "--failed-stage" in args:
        at = args.index("--failed-stage")
        stages.append(args[at + 1])
        del args[at:at + 2]
    if not args or len(args) % 2:
        sys.exit(__doc__)
    sys.exit(main(list(zip(args[0::2], args[1::2])), stages))
