#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# e2e-container-image BUILD_DIR: docker/build-and-run.sh --from-build BUILD_DIR builds the
# runtime image of docker/Dockerfile (target from-build) with podman on a debootstrapped base (no
# registry) around the programs of the meson build directory under test (no compile in the
# image; the from-source path is the script without --from-build), checks the example
# configuration inside the image, and runs the image's demo (inaswitch-demo: hosts in namespaces
# inside a privileged container, ping, TCP, UDP, an AllReduce through the switch, its metrics and
# inaswitchctl's views). Then checks that the image ships the programs with every library they
# link and not the tool chain, and prints the size and the time of each phase
# (docs/operations.md#container-image).
# Needs root: without it, exit 77 (skipped). As root, a host where podman cannot be installed
# fails: every tier must run in CI.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
(($# == 1)) || { echo "usage: $0 BUILD_DIR" >&2; exit 2; }
build_dir=$1
[ "$(id -u)" = 0 ] || { echo "e2e-container-image: needs root (podman --privileged)"; exit 77; }
if ! command -v podman >/dev/null; then
  candidate=$(apt-cache policy podman 2>/dev/null | awk '/Candidate:/ {print $2}')
  if [ -z "$candidate" ] || [ "$candidate" = "(none)" ]; then
    echo "e2e-container-image: FAIL: podman is not installed and apt has no podman package" \
      "here (apt-cache policy podman: '${candidate:-nothing}'); .ci/setup installs it" >&2
    exit 1
  fi
fi
work=$(mktemp -d /tmp/inae2e-image.XXXXXX)
trap 'rm -rf "$work"' EXIT
status=0
bash "$repo/docker/build-and-run.sh" --from-build "$build_dir" --demo --timings "$work/timings" \
  2>&1 | tee "$work/out" || status=$?
fail() { echo "e2e-container-image: FAIL: $*" >&2; exit 1; }
[ "$status" = 0 ] || fail "docker/build-and-run.sh --from-build $build_dir --demo exited $status"
grep -q '^== demo: all traffic passed' "$work/out" || fail "the demo did not report success"
grep -q '^inaswitch [0-9][0-9.]*  generation' "$work/out" || fail "no inaswitchctl status in the demo"
grep -q '"ok": true' "$work/out" || fail "no verified AllReduce in the demo"

export CONTAINERS_CONF=$work/containers.conf
printf '[containers]\ndefault_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]\n[engine]\nruntime = "runc"\n' \
  >"$CONTAINERS_CONF"
# The runtime image has the programs and their libraries, not the build stage's tool chain.
podman run --rm --network=none localhost/inaswitch:latest sh -c '
  for p in inaswitch ina-worker ina-ps inaswitchctl inaswitch-demo dpdk-devbind.py; do
    command -v "$p" >/dev/null || { echo "missing $p"; exit 1; }
  done
  for p in inaswitch ina-worker ina-ps; do
    ! ldd "/usr/local/bin/$p" | grep "not found" || { echo "$p: libraries missing"; exit 1; }
  done
  inaswitchctl --help >/dev/null || exit 1
  for p in g++ c++ meson ninja; do
    ! command -v "$p" >/dev/null || { echo "build tool $p in the runtime image"; exit 1; }
  done
  ! ls /usr/include/dpdk >/dev/null 2>&1 || { echo "DPDK headers in the runtime image"; exit 1; }
' || fail "the image's contents (above)"
echo "--- measured (seconds; size in bytes)"
cat "$work/timings"
