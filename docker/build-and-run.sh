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
#   --demo           after the check, replay a generated pcap through the switch on two
#                    net_pcap ports (--no-huge, no NIC needed) and print what it counted
#                    and sent
#   -- COMMAND...    after the check, run COMMAND in a privileged container (host network,
#                    repository at /src/inaswitch), e.g. `-- bash`
#
# Steps:
#  1. Install podman, debootstrap and runc if missing.
#  2. Make docker.io/library/debian:bookworm from a debootstrap minbase. This runs once; the
#     image is reused while it exists.
#  3. podman build docker/Dockerfile from a clean copy of the repository: git's tracked and
#     untracked files, less what .gitignore excludes (build directories).
#  4. Run `inaswitch --check-config` on the configuration inside the image.
# Podman runs with runc and ulimits inside the host's hard limits, through a private
# containers.conf (CONTAINERS_CONF). crun fails on hosts with hybrid cgroups. The host's
# /etc/containers is not modified. Set CONTAINERS_CONF yourself to use your own file instead.
# Run it as root.
set -euo pipefail

readonly IMAGE=localhost/inaswitch:latest
readonly BASE=docker.io/library/debian:bookworm
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
readonly REPO

config="$REPO/config/example-tor.yaml"
rebuild_base=0
build=1
demo=0
run_cmd=()

usage() { sed -n '3,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
die() { echo "build-and-run: $*" >&2; exit 1; }
log() { echo "==> $*" >&2; }

while (($#)); do
  case "$1" in
    --config) (($# >= 2)) || die "--config needs a file"; config=$2; shift 2 ;;
    --rebuild-base) rebuild_base=1; shift ;;
    --no-build) build=0; shift ;;
    --demo) demo=1; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; run_cmd=("$@"); break ;;
    *) usage >&2; die "unknown argument '$1'" ;;
  esac
done

((EUID == 0)) || die "run as root: podman needs it here for --privileged and host networking"
[[ -f $config ]] || die "no such configuration file: $config"
config=$(realpath "$config")

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

# 2. Base image.
if ((rebuild_base)) || ! podman image exists "$BASE"; then
  log "creating $BASE with debootstrap"
  rootfs="$work/rootfs"
  debootstrap --variant=minbase bookworm "$rootfs" >"$work/debootstrap.log" 2>&1 ||
    { tail -n 20 "$work/debootstrap.log" >&2; die "debootstrap failed (log above)"; }
  # Give the image the host's apt sources (mirror and security suite) when it has deb822 ones.
  if [[ -f /etc/apt/sources.list.d/debian.sources ]]; then
    rm -f "$rootfs/etc/apt/sources.list"
    cp /etc/apt/sources.list.d/debian.sources "$rootfs/etc/apt/sources.list.d/"
  fi
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  # Replace an older image of the same name only after the new one is imported.
  tar -C "$rootfs" -c . | podman import --change 'CMD ["bash"]' - "$BASE" >/dev/null
  rm -rf --one-file-system "$rootfs"
else
  log "using existing $BASE (--rebuild-base to recreate it)"
fi

# 3. Image.
if ((build)); then
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
  log "building $IMAGE (log: podman build output below)"
  podman build --network=host --pull=never -t "$IMAGE" -f "$context/docker/Dockerfile" "$context"
else
  podman image exists "$IMAGE" || die "--no-build given but $IMAGE does not exist"
fi

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

# Optional demo: pcap in, pcap out. A host 10.0.1.2 behind port p0 ARPs for the switch, pings
# it, and sends UDP that is routed (to 10.9.0.0/16 via 10.0.2.2 on p1), has no route, or has
# TTL 1. The switch runs without hugepages or NICs on net_pcap ports and stops once its input
# is consumed. Its final metrics and the frames it sent are printed.
if ((demo)); then
  mkdir -p "$work/demo"
  cat > "$work/demo/inaswitch.yaml" <<'YAML'
version: 1
eal:
  args: ["-l", "0-1", "--no-huge", "-m", "512", "--no-pci"]
ports:
  - name: p0
    devargs: "net_pcap0,rx_pcap=/demo/in.pcap,tx_pcap=/demo/p0-out.pcap"
    mac: "02:00:00:00:01:01"
    ipv4: [10.0.1.1/24]
  - name: p1
    devargs: "net_pcap1,rx_pcap=/demo/empty.pcap,tx_pcap=/demo/p1-out.pcap"
    mac: "02:00:00:00:02:01"
    ipv4: [10.0.2.1/24]
routes:
  - {prefix: 10.9.0.0/16, via: 10.0.2.2}
neighbours:
  - {ip: 10.0.2.2, mac: "02:00:00:00:02:02", port: p1}
control:
  listen: ""
YAML
  cat > "$work/demo/gen.py" <<'PY'
from scapy.all import ARP, ICMP, IP, UDP, Ether, Raw, wrpcap
host, sw = "02:00:00:00:01:02", "02:00:00:00:01:01"
pkts = [Ether(src=host, dst="ff:ff:ff:ff:ff:ff") / ARP(op=1, hwsrc=host, psrc="10.0.1.2", pdst="10.0.1.1"),
        Ether(src=host, dst=sw) / IP(src="10.0.1.2", dst="10.0.1.1") / ICMP(id=1, seq=1) / Raw(b"ping")]
pkts += [Ether(src=host, dst=sw) / IP(src="10.0.1.2", dst="10.9.0.5") / UDP(sport=4000 + i, dport=5001) / Raw(b"x" * 64)
         for i in range(10)]
pkts += [Ether(src=host, dst=sw) / IP(src="10.0.1.2", dst="10.7.0.1") / UDP() / Raw(b"no route"),
         Ether(src=host, dst=sw) / IP(src="10.0.1.2", dst="10.9.0.5", ttl=1) / UDP() / Raw(b"ttl 1")]
wrpcap("/demo/in.pcap", pkts)
wrpcap("/demo/empty.pcap", [], linktype=1)
PY
  log "demo: replaying a pcap through the switch on net_pcap ports"
  podman run --rm --privileged --network=none -v "$work/demo:/demo" "$IMAGE" bash -euo pipefail -c '
    python3 /demo/gen.py
    inaswitch --config /demo/inaswitch.yaml --file-prefix inaswitch-demo \
      --idle-exit-ms 1000 --stats-file /demo/metrics.prom
    echo "--- non-zero counters"
    grep -E "^inaswitch_(drops|routed|arp|icmp|port_(rx|tx)_packets)" /demo/metrics.prom | grep -v " 0$"
    echo "--- sent on p0 (to the host)"
    tshark -r /demo/p0-out.pcap 2>/dev/null
    echo "--- sent on p1 (to the gateway 10.0.2.2: MACs rewritten, TTL 64 -> 63)"
    tshark -r /demo/p1-out.pcap -T fields -E header=y \
      -e frame.number -e eth.src -e eth.dst -e ip.src -e ip.dst -e ip.ttl 2>/dev/null'
fi

if ((${#run_cmd[@]})); then
  log "running in the image: ${run_cmd[*]}"
  opts=(--rm -i --privileged --network=host -v "$config:/etc/inaswitch/inaswitch.yaml:ro")
  [[ -t 0 ]] && opts+=(-t)
  mountpoint -q /dev/hugepages && opts+=(-v /dev/hugepages:/dev/hugepages)
  [[ -d /var/run/dpdk ]] && opts+=(-v /var/run/dpdk:/var/run/dpdk)
  podman run "${opts[@]}" "$IMAGE" "${run_cmd[@]}"
fi
