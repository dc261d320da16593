#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs what the inaswitch image ships into DEST, a root file system tree: the three programs
# from the meson build directory BUILD_DIR (stripped: no debug info in the image), inaswitchctl,
# the demo and the annotated example configuration. The one list of the image's own files:
# docker/Dockerfile's build stage runs it on the programs it compiles, and
# docker/build-and-run.sh --from-build on a build directory of the host.
#
#   docker/stage-programs.sh BUILD_DIR DEST
set -euo pipefail
(($# == 2)) || { echo "usage: $0 BUILD_DIR DEST" >&2; exit 2; }
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$1
dest=$2
programs=("$build/src/app/inaswitch" "$build/src/worker/ina-worker" "$build/src/worker/ina-ps")
for p in "${programs[@]}"; do
  [[ -x $p ]] || { echo "stage-programs: $p is missing (build it: ninja -C $build)" >&2; exit 1; }
done
install -D -s -m 0755 -t "$dest/usr/local/bin" "${programs[@]}"
install -D -m 0755 -t "$dest/usr/local/bin" "$repo/tools/inaswitchctl" "$repo/docker/inaswitch-demo"
install -D -m 0755 "$repo/tests/e2e/demo.sh" "$dest/usr/local/share/inaswitch/demo.sh"
install -D -m 0644 -t "$dest/usr/local/share/inaswitch" "$repo/config/example-tor.yaml"
