#!/bin/busybox sh
# SPDX-License-Identifier: Apache-2.0
# /init of the RoCE interop guest (tests/roce_vm): brings up eth0 and a Soft-RoCE device, then
# serves the host's commands on the virtio-serial port named "ina.ctl".
#
# Kernel command line (set by lab.py):
#   ina.name=vm0  ina.ip=10.77.0.2/24  [ina.gw=10.77.0.1]  [ina.mtu=1500]
#   [ina.api=10.0.2.15/24,52:54:00:a1:00:01]   address of the NIC with that MAC (the host's
#                                              relay to the switch's control API; no RDMA on it)
#
# Control protocol, one line per message (the host parses it in lab.py):
#   host -> guest   R <id> <base64 script>   run the script (dash) in its own session
#                   K <id>                    SIGKILL that session
#   guest -> host   READY <name> gid=<index> uptime=<s>
#                   FAIL <reason>
#                   O <id> <base64 line>      output of job <id>, base64-wrapped
#                   E <id> <rc>               job <id> ended with exit status <rc>
# Only the reporter loop writes to the port after READY, so messages never interleave.

# Busybox's applets go last in PATH: iproute2's ip (bin/ip) must win over busybox's.
mkdir -p /usr/lib/busybox
/bin/busybox --install -s /usr/lib/busybox
export PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/usr/lib/busybox HOME=/root
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /run /tmp
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
echo /usr/lib/busybox/modprobe > /proc/sys/kernel/modprobe  # tc loads sch_netem on demand

fail() {
    echo "INA-VM-FAIL $*"
    [ -n "$CTL" ] && echo "FAIL $*" >&3
    poweroff -f
}

while read -r m; do modprobe "$m" || fail "modprobe $m"; done < /etc/ina-modules
mount -t configfs configfs /sys/kernel/config

NAME=vm IP= GW= MTU= API=
for arg in $(cat /proc/cmdline); do
    case "$arg" in
        ina.name=*) NAME=${arg#ina.name=} ;;
        ina.ip=*) IP=${arg#ina.ip=} ;;
        ina.gw=*) GW=${arg#ina.gw=} ;;
        ina.mtu=*) MTU=${arg#ina.mtu=} ;;
        ina.api=*) API=${arg#ina.api=} ;;
    esac
done
hostname "$NAME"

# The host connects to the port before the guest boots; find it by name (no udev here).
CTL=
for p in /sys/class/virtio-ports/*; do
    [ "$(cat "$p/name" 2>/dev/null)" = ina.ctl ] && CTL=/dev/${p##*/}
done
[ -n "$CTL" ] || fail "no virtio-serial port named ina.ctl"
exec 3<>"$CTL"

# Files the host added (a second cpio): all there, whole?
if [ -f /etc/ina-extras ]; then
    while read -r f size; do
        [ "$(stat -c %s "$f" 2>/dev/null)" = "$size" ] || fail "extra file $f missing or truncated (guest memory too small for the initramfs?)"
    done < /etc/ina-extras
fi

ip link set lo up
# ina.api: the NIC with that MAC becomes api0 whatever the probe order named it, and the other
# one eth0.
if [ -n "$API" ]; then
    API_MAC=${API#*,}
    for n in /sys/class/net/eth*; do
        [ "$(cat "$n/address")" = "$API_MAC" ] && ip link set "${n##*/}" name api0
    done
    [ -e /sys/class/net/api0 ] || fail "no NIC with MAC $API_MAC (ina.api)"
    if [ ! -e /sys/class/net/eth0 ]; then
        for n in /sys/class/net/eth*; do ip link set "${n##*/}" name eth0; done
    fi
fi
[ -n "$MTU" ] && ip link set eth0 mtu "$MTU"
ip link set eth0 up || fail "eth0 missing"
[ -n "$IP" ] && { ip addr add "$IP" dev eth0 || fail "address $IP"; }
[ -n "$GW" ] && { ip route add default via "$GW" dev eth0 || fail "route via $GW"; }
rdma link add rxe0 type rxe netdev eth0 || fail "rdma link add rxe0"
[ -n "$API" ] && { ip link set api0 up && ip addr add "${API%,*}" dev api0 || fail "ina.api on api0"; }

GID_INDEX=
if [ -n "$IP" ]; then
    GID_INDEX=$(ina-gid-index "${IP%/*}") || fail "no RoCE v2 GID for $IP"
fi
dmesg -n 4
echo "INA-VM-READY $NAME gid=$GID_INDEX uptime=$(cut -d' ' -f1 /proc/uptime)"
echo "READY $NAME gid=$GID_INDEX uptime=$(cut -d' ' -f1 /proc/uptime)" >&3

# Reporter: the only writer of the port from here on. Each finished job writes "<id> <rc>" into
# the FIFO (a write below PIPE_BUF, so atomic); the reporter sends its output and status.
J=/run/jobs
mkdir -p $J
mkfifo /run/done
(
    exec 4<>/run/done
    while read -r id rc <&4; do
        base64 "$J/$id.out" | sed "s/^/O $id /" >&3
        echo "E $id $rc" >&3
        rm -f "$J/$id.out" "$J/$id.sh"
    done
) &

run_job() {
    setsid /bin/sh "$J/$1.sh" < /dev/null > "$J/$1.out" 2>&1 &
    echo $! > "$J/$1.pid"
    wait $!
    echo "$1 $?" > /run/done
}

cd /root
while read -r op id arg <&3; do
    case "$op" in
        R) echo "$arg" | base64 -d > "$J/$id.sh" && run_job "$id" & ;;
        K) [ -f "$J/$id.pid" ] && kill -9 -"$(cat "$J/$id.pid")" 2>/dev/null ;;
    esac
done
fail "control port closed"
