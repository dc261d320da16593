# SPDX-License-Identifier: Apache-2.0
"""docs-diagrams: docs/diagrams/pipeline.dot against the code, and its SVG against the source.

  1. The nodes between `// stages: begin` and `// stages: end` are exactly the stage functions
     of pipeline/*.h (declared `(LcoreContext& ctx, const dp::Snapshot& snap, ...)`, except
     process_burst, which is the graph itself): a stage added, renamed or removed in the code
     must be drawn.
  2. A stage that writes an `EdgeBatches<XEdge>` has an edge out of its node labelled with each
     member of `enum class XEdge` (but `count`).
  3. Every committed SVG is its source rendered by tools/render_diagrams.sh now.

    python3 check_diagrams.py REPO
"""

import filecmp
import glob
import os
import re
import subprocess
import sys
import tempfile

STAGE_FN = re.compile(r"^(?:void|uint16_t)\s+(\w+)\(LcoreContext& ctx, const dp::Snapshot& snap,"
                      r"([^;]*);", re.M)
EDGE_ENUM = re.compile(r"enum class (\w+Edge) : \w+ \{(.*?)\};", re.S)


def code_stages(repo: str) -> dict:
    """stage function -> the members of its edge enum (None: it has none)."""
    enums, stages = {}, {}
    headers = sorted(glob.glob(os.path.join(repo, "pipeline", "*.h")))
    for h in headers:
        for m in EDGE_ENUM.finditer(open(h).read()):
            body = re.sub(r"//[^\n]*", "", m.group(2))
            enums[m.group(1)] = [w for w in re.findall(r"(\w+)\s*(?:=\s*\w+\s*)?,", body)
                                 if w != "count"]
    for h in headers:
        for m in STAGE_FN.finditer(open(h).read()):
            if m.group(1) == "process_burst":
                continue
            e = re.search(r"EdgeBatches<(\w+)>", m.group(2))
            stages[m.group(1)] = enums[e.group(1)] if e else None
    return stages


def dot_graph(path: str) -> tuple:
    text = open(path).read()
    block = re.search(r"// stages: begin[^\n]*\n(.*?)// stages: end", text, re.S)
    assert block, f"{path}: no `// stages: begin` ... `// stages: end` block"
    nodes = set(re.findall(r"^\s*(\w+)\s*\[", block.group(1), re.M))
    edges = {}
    for src, dst, attrs in re.findall(r"^\s*(\w+)\s*->\s*(\w+)\s*(?:\[(.*?)\])?;", text, re.M):
        label = re.search(r'label="([^"]*)"', attrs or "")
        edges.setdefault(src, set()).add(label.group(1) if label else "")
    return nodes, edges


def main() -> int:
    repo = sys.argv[1]
    failures = []
    stages = code_stages(repo)
    assert len(stages) >= 10, f"found only {sorted(stages)} in pipeline/*.h: the pattern is stale"
    nodes, edges = dot_graph(os.path.join(repo, "docs", "diagrams", "pipeline.dot"))
    for s in sorted(set(stages) - nodes):
        failures.append(f"stage {s} (pipeline/*.h) is not drawn in docs/diagrams/pipeline.dot")
    for s in sorted(nodes - set(stages)):
        failures.append(f"pipeline.dot draws stage {s}, which pipeline/*.h does not declare")
    for s, members in sorted(stages.items()):
        for edge in members or []:
            if edge not in edges.get(s, set()):
                failures.append(f"pipeline.dot: no edge labelled {edge!r} out of {s}")
    print(f"{len(stages)} stages, {sum(len(m or []) for m in stages.values())} enum edges checked")

    with tempfile.TemporaryDirectory() as out:
        r = subprocess.run(["bash", os.path.join(repo, "tools", "render_diagrams.sh"), out],
                           capture_output=True, text=True)
        if r.returncode != 0:
            failures.append(f"render_diagrams.sh failed: {r.stderr.strip()}")
        else:
            for svg in sorted(glob.glob(os.path.join(out, "*.svg"))):
                committed = os.path.join(repo, "docs", "diagrams", os.path.basename(svg))
                if not os.path.exists(committed) or not filecmp.cmp(svg, committed, shallow=False):
                    failures.append(f"{committed} is not its .dot rendered: run "
                                    "tools/render_diagrams.sh (or ninja -C build diagrams)")
    for f in failures:
        print(f"FAIL: {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
