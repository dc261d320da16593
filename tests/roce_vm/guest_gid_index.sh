#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# ina-gid-index ADDRESS (in the RoCE interop guest): prints the index of rxe0's RoCE v2 GID for
# the IPv4 ADDRESS (::ffff:a.b.c.d), or for an IPv6 ADDRESS written in full as sysfs shows GIDs
# (eight groups of four hex digits, lab.py passes ipaddress's `exploded`). rxe adds it from a
# netdev event after the address appears, so this looks for at most 20 s; exit status 1 if it
# never shows up.
case "$1" in
    *:*) want=$1 ;;
    *) want=$(echo "$1" | awk -F. '{printf "0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x", $1, $2, $3, $4}') ;;
esac
port=/sys/class/infiniband/rxe0/ports/1
tries=0
while [ $tries -lt 200 ]; do
    for g in "$port"/gids/*; do
        i=${g##*/}
        if [ "$(cat "$g" 2>/dev/null)" = "$want" ] &&
           [ "$(cat "$port/gid_attrs/types/$i" 2>/dev/null)" = "RoCE v2" ]; then
            echo "$i"
            exit 0
        fi
    done
    tries=$((tries + 1))
    sleep 0.1
done
exit 1
