# SPDX-License-Identifier: Apache-2.0
"""Every golden case's committed files are what its gen.py writes today.

Copies tests/golden into a temporary folder, deletes every case's pcaps there, runs each case's
gen.py in the copy, and byte-compares the regenerated pcaps and case.yaml with the committed
ones. A gen.py edited without regenerating, a pcap edited by hand or copied from the switch's
output, or a stale pcap no gen.py writes any more, fails here.

usage: regen_check.py [GOLDEN_DIR]   (default: the folder of this script)"""

import concurrent.futures
import filecmp
import os
import shutil
import subprocess
import sys
import tempfile

PYTHON = "/usr/bin/python3"  # Debian's, with scapy


def case_dirs(root: str) -> list[str]:
    return sorted(d for d in os.listdir(root)
                  if os.path.isfile(os.path.join(root, d, "gen.py")))


def compared_files(folder: str) -> set[str]:
    return {f for f in os.listdir(folder) if f.endswith(".pcap") or f == "case.yaml"}


def main() -> int:
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(__file__))
    cases = case_dirs(root)
    if not cases:
        print(f"no case with a gen.py under {root}")
        return 2
    failures = []
    with tempfile.TemporaryDirectory(prefix="golden-regen-") as tmp:
        copy = os.path.join(tmp, "golden")
        shutil.copytree(root, copy, ignore=shutil.ignore_patterns("__pycache__"))
        # Captures a gen.py starts from (tests/data, as ../../data from a case) come along.
        data = os.path.join(os.path.dirname(root), "data")
        if os.path.isdir(data):
            shutil.copytree(data, os.path.join(tmp, "data"))
        def regenerate(case: str) -> subprocess.CompletedProcess:
            work = os.path.join(copy, case)
            for f in os.listdir(work):
                if f.endswith(".pcap"):
                    os.unlink(os.path.join(work, f))
            return subprocess.run([PYTHON, "-B", "gen.py"], cwd=work, capture_output=True,
                                  text=True, timeout=300)

        # Each gen.py is a process of its own in its own folder: as many at once as there are
        # CPUs (scapy's start-up is most of each one's time).
        with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            runs = list(pool.map(regenerate, cases))
        for case, run in zip(cases, runs):
            work = os.path.join(copy, case)
            if run.returncode != 0:
                failures.append(f"{case}: gen.py exited {run.returncode}\n{run.stderr[-2000:]}")
                continue
            committed = compared_files(os.path.join(root, case))
            regenerated = compared_files(work)
            for f in sorted(committed - regenerated):
                failures.append(f"{case}/{f}: committed, but gen.py no longer writes it")
            for f in sorted(regenerated - committed):
                failures.append(f"{case}/{f}: gen.py writes it, but it is not committed")
            for f in sorted(committed & regenerated):
                if not filecmp.cmp(os.path.join(root, case, f), os.path.join(work, f),
                                   shallow=False):
                    failures.append(f"{case}/{f}: differs from what gen.py writes "
                                    f"(run gen.py in tests/golden/{case} and review the diff)")
            print(f"{case}: {len(committed & regenerated)} files regenerated and compared")
    for f in failures:
        print("FAIL", f)
    print(f"{len(cases)} cases, {len(failures)} mismatches")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
