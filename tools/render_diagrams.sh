#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Renders docs/diagrams/*.dot to SVG with graphviz (Debian package graphviz), next to each
# source, or into OUTDIR when given (tests/tools/check_diagrams.py renders into a temporary
# directory and fails when a committed SVG differs).
#
#   tools/render_diagrams.sh [OUTDIR]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
command -v dot >/dev/null || { echo "render_diagrams: no dot: apt-get install graphviz" >&2; exit 1; }
for src in "$repo"/docs/diagrams/*.dot; do
  name=$(basename "${src%.dot}").svg
  out=${1:-$repo/docs/diagrams}/$name
  # The SPDX line every file of the repository carries, after the XML declaration.
  dot -Tsvg "$src" |
    sed '1a <!-- SPDX-License-Identifier: Apache-2.0 -->\n<!-- Generated from '"$(basename "$src")"' by tools/render_diagrams.sh: edit the source, not this file -->' >"$out.tmp"
  mv "$out.tmp" "$out"
  echo "rendered $out"
done
