#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the inaswitch image with podman on a Debian 12 host that has no container registry.
# It then checks a configuration inside the image and can run one command in it.
#
#   docker/build-and-run.sh [options] [-- COMMAND...]
#
#   --config FILE    configuration to check, mounted at /etc/inaswitch/inaswitch.yaml
#                    (default: config/example-tor.yaml)
#   --rebuild-base   debootstrap the debian:bookworm base image again even if it exists
#   --no-build       skip the image build and use the existing localhost/inaswitch image
#   --from-build DIR do not compile in the image: take the programs of the meson build
#                    directory DIR (built on this Debian 12 host; ninja brings them up to
#                    date) and build the Dockerfile's `from-build` target, the runtime image
#                    with them (default: compile from source in the `build` stage)
#   --demo           after the check, run the image's demo (inaswitch-demo: hosts in
#                    namespaces, an AllReduce through the switch, no NIC, --no-huge); exit
#                    non-zero if it fails
#   --timings FILE   append `phase seconds` lines (base, build, demo) to FILE
#   -- COMMAND...    after the check, run COMMAND in a privileged container on the host
#                    network, e.g. `-- bash` or `-- inaswitchctl status`
#
# Steps:
#  1. Install podman, debootstrap and runc if missing.
#  2. Make docker.io/library/debian:bookworm from a debootstrap minbase. The image is reused
#     while its packages' versions are those the host's apt would install now.
#  3. podman build docker/Dockerfile from a clean copy of the repository: git's tracked and
#     untracked files, less what .gitignore excludes (build directories). DEPS_KEY, a hash of
#     the versions of the packages its apt layers install, keeps those layers cached until a
#     package changes. With --from-build the context is the Dockerfile and programs/, the
#     tree docker/stage-programs.sh installs from DIR, and only the runtime stage is built.
#  4. Run `inaswitch --check-config` on the configuration inside the image.
# Podman runs with runc and ulimits inside the host's hard limits, through a private
# containers.conf (CONTAINERS_CONF). crun fails on hosts with hybrid cgroups. The host's
# /etc/containers is not modified. Set CONTAINERS_CONF yourself to use your own file instead.
# Run it as root.
set -euo pipefail

readonly IMAGE=localhost/inaswitch:latest
readonly IMAGE_BUILD_STAGE=localhost/inaswitch-build:latest
readonly BASE=docker.io/library/debian:bookworm
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
readonly REPO

config="$REPO/config/example-tor.yaml"
rebuild_base=0
build=1
from_build=
demo=0
timings=/dev/null
run_cmd=()

usage() { sed -n '3,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
die() { echo "build-and-run: $*" >&2; exit 1; }
log() { echo "==> $*" >&2; }

while (($#)); do
  case "$1" in
    --config) (($# >= 2)) || die "--config needs a file"; config=$2; shift 2 ;;
    --rebuild-base) rebuild_base=1; shift ;;
    --no-build) build=0; shift ;;
    --from-build) (($# >= 2)) || die "--from-build needs a meson build directory"
                  from_build=$2; shift 2 ;;
    --demo) demo=1; shift ;;
    --timings) (($# >= 2)) || die "--timings needs a file"; timings=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; run_cmd=("$@"); break ;;
    *) usage >&2; die "unknown argument '$1'" ;;
  esac
done

((EUID == 0)) || die "run as root: podman needs it here for --privileged and host networking"
[[ -f $config ]] || die "no such configuration file: $config"
config=$(realpath "$config")
if [[ -n $from_build ]]; then
  [[ -f $from_build/build.ninja ]] || die "--from-build: $from_build is not a meson build directory"
  from_build=$(realpath "$from_build")
fi

work=$(mktemp -d /tmp/inaswitch-image.XXXXXX)
# debootstrap mounts /proc and /sys inside the root it builds and can leave them mounted when it
# fails: unmount anything under $work first, and never let rm cross into another file system.
cleanup() {
  { findmnt -rn -o TARGET | grep -F "$work/" | sort -r || true; } |
    while read -r m; do umount -l "$m" || true; done
  rm -rf --one-file-system "$work"
}
trap cleanup EXIT

# 1. Tools.
missing=()
for p in podman debootstrap runc; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  log "installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [[ -z ${CONTAINERS_CONF:-} ]]; then
  cat > "$work/containers.conf" <<'CONF'
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
[engine]
runtime = "runc"
CONF
  export CONTAINERS_CONF="$work/containers.conf"
fi

now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
# phase START_MS: appends "phase seconds" to the --timings file.
record() { printf '%s %d.%03d\n' "$1" $(( ($(now_ms) - $2) / 1000 )) $(( ($(now_ms) - $2) % 1000 )) >>"$timings"; }

# The versions the host's apt would install (its lists: .ci/setup updates them when it installs)
# of PACKAGES, one "name version" a line, sorted.
candidate_versions() {
  apt-cache policy "$@" 2>/dev/null |
    awk '/^[^ ].*:$/ { name = substr($1, 1, length($1) - 1) }
         /^  Candidate:/ && $2 != "(none)" { print name, $2 }' | sort -u
}
# PACKAGES and every package they depend on, recursively, one name a line.
with_dependencies() {
  apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
      --no-replaces --no-enhances "$@" 2>/dev/null | grep -v -e '^ ' -e '^<' | sort -u
}

# The packages of the Dockerfile's `apt-get install` commands, one a line.
dockerfile_packages() {
  sed -n '/apt-get install/,/>\/dev\/null/p' "$REPO/docker/Dockerfile" | sed 's/[\\]/ /g' |
    tr -s ' ' '\n' | grep -E '^[a-z0-9][a-z0-9.+-]+$' | grep -v -x -E 'apt-get|install|dev|null'
}

# DEPS_KEY: the versions of every package the Dockerfile's apt layers install. Unchanged, the
# layers come from podman's cache; changed, they are built again with the new packages.
dependencies_key() {
  # shellcheck disable=SC2046  # package names are words
  candidate_versions $(with_dependencies $(dockerfile_packages)) | sha256sum | cut -c1-16
}

# 2. Base image: kept while the versions of its packages match what the mirror serves now (the
# host's candidates); debootstrapped again when any of them changed.
t=$(now_ms)
base_current() {
  podman image exists "$BASE" || return 1
  local inside
  inside=$(podman run --rm --network=none "$BASE" dpkg-query -W -f '${Package} ${Version}\n' |
    sort -u) || return 1
  local host
  # shellcheck disable=SC2046  # package names are words
  host=$(candidate_versions $(awk '{print $1}' <<<"$inside"))
  if [[ -z $host ]]; then
    log "the host's apt lists are empty: keeping $BASE unchecked (apt-get update to compare)"
    return 0
  fi
  [[ $inside == "$host" ]]
}
if ((rebuild_base)) || ! base_current; then
  log "creating $BASE with debootstrap"
  rootfs="$work/rootfs"
  debootstrap --variant=minbase bookworm "$rootfs" >"$work/debootstrap.log" 2>&1 ||
    { tail -n 20 "$work/debootstrap.log" >&2; die "debootstrap failed (log above)"; }
  # Give the image the host's apt sources (mirror and security suite) when it has deb822 ones.
  if [[ -f /etc/apt/sources.list.d/debian.sources ]]; then
    rm -f "$rootfs/etc/apt/sources.list"
    cp /etc/apt/sources.list.d/debian.sources "$rootfs/etc/apt/sources.list.d/"
  fi
  # debootstrap takes the release as first published; the updates and security suites of the
  # host's sources bring it to the versions the host's apt installs, which is what
  # base_current compares against.
  cp /etc/resolv.conf "$rootfs/etc/resolv.conf"
  { chroot "$rootfs" apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
      chroot "$rootfs" apt-get upgrade -y -qq; } >>"$work/debootstrap.log" 2>&1 ||
    { tail -n 20 "$work/debootstrap.log" >&2; die "upgrading the base failed (log above)"; }
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* \
    "$rootfs"/var/cache/apt/*.bin
  # Replace an older image of the same name only after the new one is imported.
  tar -C "$rootfs" -c . | podman import --change 'CMD ["bash"]' - "$BASE" >/dev/null
  rm -rf --one-file-system "$rootfs"
else
  log "using $BASE: its package versions are current (--rebuild-base to recreate it)"
fi
record base "$t"

# 3. Image.
t=$(now_ms)
if ((build)) && [[ -n $from_build ]]; then
  # The host's programs, current, staged as the image installs them; the context holds nothing
  # else, so only the runtime stage and one COPY are built.
  ninja -C "$from_build" src/app/inaswitch src/worker/ina-worker src/worker/ina-ps >/dev/null ||
    die "ninja -C $from_build failed"
  context="$work/context"
  install -D -m 0644 "$REPO/docker/Dockerfile" "$context/docker/Dockerfile"
  "$REPO/docker/stage-programs.sh" "$from_build" "$context/programs"
  deps_key=$(dependencies_key)
  log "building $IMAGE from the programs of $from_build (package versions $deps_key)"
  podman build --network=host --pull=never --layers --build-arg "DEPS_KEY=$deps_key" \
    --target from-build -t "$IMAGE" -f "$context/docker/Dockerfile" "$context"
elif ((build)); then
  context="$work/context"
  mkdir -p "$context"
  if git -C "$REPO" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    # Tracked files still present on disk, plus untracked files that .gitignore does not exclude.
    (cd "$REPO" && git ls-files -z --cached --others --exclude-standard) |
      (cd "$REPO" && while IFS= read -r -d '' f; do
         [[ -e $f ]] && printf '%s\0' "$f"
       done) |
      tar -C "$REPO" --null -T - -c | tar -C "$context" -x
  else
    tar -C "$REPO" --exclude='./build*' --exclude=./.git -c . | tar -C "$context" -x
  fi
  deps_key=$(dependencies_key)
  log "building $IMAGE (package versions $deps_key; podman build output below)"
  podman build --network=host --pull=never --layers --build-arg "DEPS_KEY=$deps_key" \
    -t "$IMAGE" -f "$context/docker/Dockerfile" "$context"
  # The build stage under a tag of its own keeps its layers (the apt layer above all) from
  # counting as dangling; its images of earlier builds, untagged now, are removed (nothing else:
  # the filter is the stage's label).
  podman build --network=host --pull=never --layers --build-arg "DEPS_KEY=$deps_key" \
    --target build -t "$IMAGE_BUILD_STAGE" -f "$context/docker/Dockerfile" "$context" >/dev/null
  podman image prune -f --filter label=org.inaswitch.stage=build >/dev/null
else
  podman image exists "$IMAGE" || die "--no-build given but $IMAGE does not exist"
fi
# The images $IMAGE named before this build, of either target (untagged now), are removed.
if ((build)); then
  podman image prune -f --filter label=org.inaswitch.stage=image >/dev/null
fi
record build "$t"
podman image inspect --format '{{.Size}}' "$IMAGE" | awk '{printf "size_bytes %d\n", $1}' >>"$timings"

# 4. Configuration check: no privileges, no network.
log "checking $config"
status=0
podman run --rm --network=none -v "$config:/etc/inaswitch/inaswitch.yaml:ro" "$IMAGE" \
  inaswitch --check-config /etc/inaswitch/inaswitch.yaml || status=$?
case $status in
  0) log "configuration is valid" ;;
  2) die "configuration is invalid (errors above)" ;;
  *) die "inaswitch --check-config failed with exit status $status" ;;
esac

# Optional demo: the image's own (docker/inaswitch-demo): Linux hosts in network namespaces inside
# a privileged container without host networking, the switch on af_packet vdevs with
# --no-huge, ping/TCP/UDP and an AllReduce through it, its metrics and inaswitchctl's view.
if ((demo)); then
  log "demo: inaswitch-demo in the image"
  t=$(now_ms)
  podman run --rm --privileged --network=none "$IMAGE" inaswitch-demo
  record demo "$t"
fi

if ((${#run_cmd[@]})); then
  log "running in the image: ${run_cmd[*]}"
  opts=(--rm -i --privileged --network=host -v "$config:/etc/inaswitch/inaswitch.yaml:ro")
  [[ -t 0 ]] && opts+=(-t)
  mountpoint -q /dev/hugepages && opts+=(-v /dev/hugepages:/dev/hugepages)
  [[ -d /var/run/dpdk ]] && opts+=(-v /var/run/dpdk:/var/run/dpdk)
  podman run "${opts[@]}" "$IMAGE" "${run_cmd[@]}"
fi
