#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""What the sanitizer tier builds and runs, from meson's own test list.

  test_targets.py targets BUILDDIR SUITE...  the ninja targets the suites' tests depend on
  test_targets.py tests BUILDDIR SUITE...    the names of the suites' tests that run something
                                             built (a test of pure Python or of the sources
                                             gives the same answer in every build: run once)

meson 1.0's `meson test` rebuilds every target; the sanitizer tier needs only what its tests
run, and the worker programs and benchmarks are not among them.
"""
import json
import os
import subprocess
import sys


def main() -> int:
    if len(sys.argv) < 4 or sys.argv[1] not in ("targets", "tests"):
        print(__doc__, file=sys.stderr)
        return 2
    what, builddir, suites = sys.argv[1], sys.argv[2], {"inaswitch:" + s for s in sys.argv[3:]}

    def introspect(option: str) -> list:
        return json.loads(subprocess.check_output(["meson", "introspect", builddir, option]))

    targets = {t["id"]: t for t in introspect("--targets")}
    selected = [t for t in introspect("--tests") if suites & set(t["suite"]) and t["depends"]]
    if not selected:
        print(f"no test of suites {sorted(suites)} runs anything built", file=sys.stderr)
        return 1
    if what == "tests":
        print(" ".join(t["name"] for t in selected))
        return 0
    root = os.path.abspath(builddir)
    outputs = {os.path.relpath(f, root)
               for t in selected for dep in t["depends"] for f in targets[dep]["filename"]}
    print(" ".join(sorted(outputs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
