#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Prints the ninja targets the tests of the given suites depend on, relative to the build dir.

meson 1.0's `meson test` rebuilds every target; the sanitizer tier runs only the unit, stage and
golden suites, so building the worker programs and benchmarks under ASan too would cost CI time
for nothing. Usage: test_targets.py BUILDDIR SUITE [SUITE ...]
"""
import json
import os
import subprocess
import sys


def main() -> int:
    builddir, suites = sys.argv[1], {"inaswitch:" + s for s in sys.argv[2:]}
    def introspect(what: str) -> list:
        return json.loads(subprocess.check_output(["meson", "introspect", builddir, what]))
    targets = {t["id"]: t for t in introspect("--targets")}
    outputs = set()
    selected = 0
    for test in introspect("--tests"):
        if suites & set(test["suite"]):
            selected += 1
            for dep in test["depends"]:
                outputs.update(targets[dep]["filename"])
    if not selected:
        print(f"no test in suites {sorted(suites)}", file=sys.stderr)
        return 1
    root = os.path.abspath(builddir)
    print(" ".join(sorted(os.path.relpath(f, root) for f in outputs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
