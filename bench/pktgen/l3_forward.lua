-- SPDX-License-Identifier: Apache-2.0
-- Pktgen-DPDK 23.x: L3 forwarding rate and loss of inaswitch (docs/benchmarking.md).
-- Port 0 sends 64 B IPv4/UDP frames to 200 destinations behind the switch's port 1; port 1
-- counts what the switch routed. Sweeps the offered rate and prints one CSV line per step.
--   pktgen -l 0-4 -n 4 -a <nic0> -a <nic1> -- -P -m "[1:2].0,[3:4].1" -f bench/pktgen/l3_forward.lua
package.path = package.path .. ";?.lua;test/?.lua;app/?.lua;"
require "Pktgen"

local tx, rx = "0", "1"
local switch_mac = os.getenv("SWITCH_MAC") or "02:00:00:00:00:01"  -- the switch's port 0
local seconds = tonumber(os.getenv("STEP_SECONDS") or "5")

pktgen.stop("all")
pktgen.clr()
pktgen.set_mac(tx, "dst", switch_mac)
pktgen.set_ipaddr(tx, "src", "10.0.1.2/24")
pktgen.set_proto(tx, "udp")
pktgen.set(tx, "size", 64)
pktgen.set(tx, "burst", 32)
pktgen.set(tx, "count", 0)
-- 200 destinations 10.0.2.2 .. 10.0.2.201 (the switch config lists them as neighbours on port 1)
pktgen.range.dst_mac(tx, "start", switch_mac)
pktgen.range.dst_ip(tx, "start", "10.0.2.2")
pktgen.range.dst_ip(tx, "inc", "0.0.0.1")
pktgen.range.dst_ip(tx, "min", "10.0.2.2")
pktgen.range.dst_ip(tx, "max", "10.0.2.201")
pktgen.range.src_ip(tx, "start", "10.0.1.2")
pktgen.range.src_ip(tx, "inc", "0.0.0.0")
pktgen.range.src_ip(tx, "min", "10.0.1.2")
pktgen.range.src_ip(tx, "max", "10.0.1.2")
pktgen.range.src_port(tx, "start", 1024)
pktgen.range.src_port(tx, "inc", 1)
pktgen.range.src_port(tx, "min", 1024)
pktgen.range.src_port(tx, "max", 65000)
pktgen.range.dst_port(tx, "start", 5000)
pktgen.range.dst_port(tx, "inc", 0)
pktgen.range.dst_port(tx, "min", 5000)
pktgen.range.dst_port(tx, "max", 5000)
pktgen.range.pkt_size(tx, "start", 64)
pktgen.range.pkt_size(tx, "inc", 0)
pktgen.range.pkt_size(tx, "min", 64)
pktgen.range.pkt_size(tx, "max", 64)
pktgen.set_range(tx, "on")

print("rate_pct,tx_pps,rx_pps,loss_pct")
for _, rate in ipairs({10, 25, 50, 75, 90, 100}) do
    pktgen.clr()
    pktgen.set(tx, "rate", rate)
    pktgen.start(tx)
    pktgen.delay(1000)  -- warm-up
    local t0 = pktgen.portStats("all", "port")
    pktgen.delay(seconds * 1000)
    local t1 = pktgen.portStats("all", "port")
    pktgen.stop(tx)
    local sent = t1[0].opackets - t0[0].opackets
    local got = t1[1].ipackets - t0[1].ipackets
    printf("%d,%.0f,%.0f,%.3f\n", rate, sent / seconds, got / seconds,
           sent > 0 and 100.0 * (sent - got) / sent or 0)
    pktgen.delay(1000)
end
