#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks the include graph of src/ and pipeline/ against the layer order.

Every folder of production code has a layer (LAYERS below, docs/architecture.md "Layers"). A
file may include headers of its own folder and of folders in strictly lower layers, never of a
peer or a higher layer: that keeps the graph acyclic, so each layer builds as one static
library linked only to the layers below it. A folder missing from LAYERS is an error, so a new
folder (a feature, a layer) is placed deliberately.

Feature folders, src/features/<feature>/, hold one protocol's pieces across the layers; a file's
stem says its layer (FEATURE_PIECES: view* is a dataplane piece, datapath* a pipeline piece,
config*, compile*, metrics*, control*). A piece may include the shared folder of its layer;
within a feature the pieces follow the layer order; a feature includes the shared layers and
itself, never another feature; of the shared folders only src/app (the composition root, where
each feature is registered once) includes a feature.

Usage: check_layers.py [--root DIR]   (exit 0: clean, 1: violations, listed one per line)
"""

import argparse
import os
import re
import sys

# Lowest first. Folders in one layer are peers and must not include each other.
LAYERS = [
    ["src/net", "src/wire", "src/reduce", "src/roce"],  # pure codecs and kernels
    ["src/agg"],                                         # protocol-free aggregation core
    ["src/ina"],                                         # INA protocol and chunk table
    ["src/dataplane", "src/worker"],                     # snapshot types, counters; host tools
    ["pipeline"],                                        # the packet path
    ["src/config"],                                      # the YAML schema: above the packet path
    ["src/compile", "src/runtime"],                      # config -> snapshot; ports, worker loop
    ["src/metrics"],                                     # Stats and its exposition
    ["src/control"],                                     # control plane, HTTP API
    ["src/app"],                                         # composition root, main()
]
FEATURES = "src/features"
# Stem prefix of a file in a feature folder -> the shared folder whose layer it takes.
FEATURE_PIECES = {
    "view": "src/dataplane",    # snapshot view and per-lcore counter list
    "datapath": "pipeline",     # stages
    "config": "src/config",     # schema section, loader, validation
    "compile": "src/compile",   # config section -> snapshot view
    "metrics": "src/metrics",   # exposition of the feature's stats
    "control": "src/control",   # attach/detach, API routes
}
SHARED_OF = {}  # feature piece unit -> the shared folder whose layer it extends (and may include)
REGISTRATION = "src/app"  # the composition root registers each feature, in one place
SOURCE_ROOTS = ["src", "pipeline"]  # every folder with code under these needs a layer
INCLUDE_DIRS = ["", "src"]  # the build's include_directories('.', 'src'), in order
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
SUFFIXES = (".h", ".hpp", ".cc", ".cpp")


def layer_of():
    rank = {}
    for i, folders in enumerate(LAYERS):
        for f in folders:
            rank[f] = i
    return rank


def folder_of(path, rank):
    """The layer unit holding `path` (relative to the root): a folder of LAYERS, or for a feature
    piece "src/features/<f>/<piece>" (its rank is that of FEATURE_PIECES[piece]); else None."""
    parts = path.split("/")
    if path.startswith(FEATURES + "/") and len(parts) == 4:
        stem = parts[3].split(".")[0]
        for piece, shared in FEATURE_PIECES.items():
            if stem.startswith(piece):
                unit = f"{FEATURES}/{parts[2]}/{piece}"
                rank[unit] = rank[shared]
                SHARED_OF[unit] = shared
                return unit
        return None
    for n in range(len(parts) - 1, 0, -1):
        candidate = "/".join(parts[:n])
        if candidate in rank:
            return candidate
    return None


def feature_of(unit):
    return unit.split("/")[2] if unit.startswith(FEATURES + "/") else None


def feature_edge_problem(src_unit, dst_unit):
    """Why an include between these units breaks the feature rule, or "" if it does not."""
    src_f, dst_f = feature_of(src_unit), feature_of(dst_unit)
    if dst_f is None or src_f == dst_f:
        return ""
    if src_f is not None:
        return "another feature's piece; features meet only through the shared layers"
    if src_unit != REGISTRATION:
        return f"a feature piece, which only {REGISTRATION} (the one registration) includes"
    return ""


def resolve(root, including, name):
    """Root-relative path of a quoted include, or None if it is not in the tree."""
    here = os.path.dirname(including)
    for base in [here] + INCLUDE_DIRS:
        rel = os.path.normpath(os.path.join(base, name))
        if os.path.isfile(os.path.join(root, rel)):
            return rel.replace(os.sep, "/")
    return None


def sources(root):
    for top in SOURCE_ROOTS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames.sort()
            for f in sorted(filenames):
                if f.endswith(SUFFIXES):
                    yield os.path.relpath(os.path.join(dirpath, f), root).replace(os.sep, "/")


def check(root):
    rank = layer_of()
    problems = []
    edges = set()
    for path in sources(root):
        src_folder = folder_of(path, rank)
        if src_folder is None:
            if path.startswith(FEATURES + "/"):
                problems.append(f"{path}: a feature file is src/features/<feature>/<piece>*.{{h,cc}} "
                                f"with piece one of {', '.join(FEATURE_PIECES)}")
            else:
                problems.append(f"{path}: folder {os.path.dirname(path)}/ has no layer: add it to "
                                "LAYERS in tests/tools/check_layers.py and to docs/architecture.md")
            continue
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as fh:
            for lineno, line in enumerate(fh, 1):
                m = INCLUDE_RE.match(line)
                if not m:
                    continue
                target = resolve(root, path, m.group(1))
                if target is None:
                    problems.append(f"{path}:{lineno}: \"{m.group(1)}\" is not in the tree")
                    continue
                dst_folder = folder_of(target, rank)
                if dst_folder is None:
                    problems.append(f"{path}:{lineno}: includes {target}, outside every layer")
                    continue
                if dst_folder == src_folder:
                    continue
                edges.add((src_folder, dst_folder))
                wrong = feature_edge_problem(src_folder, dst_folder)
                if wrong:
                    problems.append(f"{path}:{lineno}: includes {target}: {wrong}")
                    continue
                if SHARED_OF.get(src_folder) == dst_folder:
                    continue
                if rank[dst_folder] >= rank[src_folder]:
                    kind = "a peer" if rank[dst_folder] == rank[src_folder] else "a higher layer"
                    problems.append(
                        f"{path}:{lineno}: {src_folder} (layer {rank[src_folder]}) includes "
                        f"{target} of {kind}, {dst_folder} (layer {rank[dst_folder]})")
    return problems, edges


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(__file__), "..", ".."))
    ap.add_argument("--edges", action="store_true", help="print the folder include graph")
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    problems, edges = check(root)
    if args.edges:
        for a, b in sorted(edges):
            print(f"{a} -> {b}")
    for p in problems:
        print(p)
    if problems:
        print(f"check_layers: {len(problems)} violation(s) of the layer order", file=sys.stderr)
        return 1
    print(f"check_layers: {len(edges)} folder edges, all downward")
    return 0


if __name__ == "__main__":
    sys.exit(main())
