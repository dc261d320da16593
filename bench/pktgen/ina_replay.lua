-- SPDX-License-Identifier: Apache-2.0
-- Pktgen-DPDK 23.x: INA aggregation through inaswitch (docs/benchmarking.md).
-- Port 0 replays a pcap of N workers' contributions (bench/inapcap.py; load it with
-- `-s 0:<file>.pcap` on pktgen's command line); the switch aggregates them (job 1, aggregator,
-- parent 10.0.2.2 behind port 1) and port 1 receives one partial result per chunk.
-- Prints contributions/s offered, partials/s received and the ratio (should be 1/N).
--   pktgen -l 0-4 -n 4 -a <nic0> -a <nic1> -- -P -m "[1:2].0,[3:4].1" \
--       -s 0:bench/pcaps/ina_8w_1k_fp32.pcap -f bench/pktgen/ina_replay.lua
-- Build the pcap with --loop (bench/inapcap.py ina ... --chunks 128 --loop) and give the job a
-- window <= chunks / 4: a plain file's sequence numbers, replayed again, would be late
-- duplicates (stale) after the first pass.
package.path = package.path .. ";?.lua;test/?.lua;app/?.lua;"
require "Pktgen"

local tx = "0"
local workers = tonumber(os.getenv("INA_WORKERS") or "8")
local seconds = tonumber(os.getenv("STEP_SECONDS") or "5")
local rate = tonumber(os.getenv("RATE_PCT") or "100")

pktgen.stop("all")
pktgen.clr()
pktgen.pcap(tx, "on")
pktgen.set(tx, "rate", rate)
pktgen.start(tx)
pktgen.delay(1000)
local t0 = pktgen.portStats("all", "port")
pktgen.delay(seconds * 1000)
local t1 = pktgen.portStats("all", "port")
pktgen.stop(tx)
local sent = t1[0].opackets - t0[0].opackets
local got = t1[1].ipackets - t0[1].ipackets
printf("contributions/s %.0f  partials/s %.0f  partials per contribution %.4f (expected %.4f)\n",
       sent / seconds, got / seconds, sent > 0 and got / sent or 0, 1 / workers)
