# SPDX-License-Identifier: Apache-2.0
"""e2e-control-stress: the control plane cannot be wedged from the network or the API.

The reliability issue's deadlock: an ARP flood from 4000 senders (far more than the workers'
event de-duplication memory holds) fills the workers' event rings while rounds of four
concurrent PUTs each replace 64 INA jobs (128 table commands per worker each) over 4096 routes
(so each holds the control lock for a while). Before the fix the API thread held the control
lock while spinning for room in a command ring, a worker spun for room in its full event ring to
acknowledge a detach, and only the lock holder's peer could drain that ring: forwarding stopped,
the API hung and SIGTERM was ignored.

On the old code this hangs every time here (the API times out, SIGTERM is ignored). Asserted,
with two worker lcores: every PUT is answered within its deadline (applied, or refused
with a reason), /metrics answers during the flood, the hosts still reach each other afterwards,
no job table is left behind, and SIGTERM stops the switch within one second.
"""

import os
import signal
import threading
import time

from testbed import (Host, Port, Testbed, TestFailure, check, log, main, to_yaml,
                     wait_until)

FLOOD_SECONDS = float(os.environ.get("INAE2E_FLOOD_SECONDS", "8"))
SENDERS = 2000  # per flooder; far more than the workers' 256-slot event de-duplication
ROUNDS = 4
# Routes make each change's snapshot build take long enough (tens of ms) for the flood to fill
# the workers' 4096-entry event rings while the change holds the control lock.
ROUTES = [{"prefix": f"172.{16 + i // 256}.{i % 256}.0/24", "via": "10.0.2.2"}
          for i in range(4096)]

# Sends ARP requests for the switch's address from `senders` distinct (MAC, IPv4) pairs (block
# `base` of them), as fast
# as one AF_PACKET socket goes, for `seconds`; prints how many it sent.
FLOODER = r"""
import socket, struct, sys, time
dev, seconds, senders, base = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((dev, 0))
frames = []
for k in range(senders):
    i = base * senders + k
    mac = bytes([2, 0x77, 0, i >> 16, (i >> 8) & 0xff, i & 0xff])
    sip = bytes([10, 1, 16 + (i >> 8), i & 0xff])
    arp = struct.pack("!HHBBH6s4s6s4s", 1, 0x0800, 6, 4, 1, mac, sip, b"\0" * 6,
                      bytes([10, 1, 0, 1]))
    frames.append(b"\xff" * 6 + mac + b"\x08\x06" + arp + b"\0" * 18)
sent, end = 0, time.monotonic() + seconds
while time.monotonic() < end:
    for f in frames:
        try:
            s.send(f)
            sent += 1
        except OSError:
            pass
print(sent, flush=True)
"""


def jobs(window: int, count: int = 64) -> list[dict]:
    return [{"job_id": 100 + i, "role": "aggregator", "bsl": 64, "abm": "1-2", "op": "sum",
             "elem_type": "int32", "max_elements": 64, "window": window, "root": "10.0.2.2"}
            for i in range(count)]


def test(exe: str) -> None:
    # Two worker lcores on the machine's two cores (lcore 2 shares core 1).
    eal = ["--lcores", "0@0,1@1,2@1", "--no-huge", "-m", "512", "--no-pci",
           "--log-level", "*:warning"]
    with Testbed(exe, [
            # A /16 on p0, so every flooding sender is a station on the subnet the switch learns.
            Port("p0", ipv4=["10.1.0.1/16"], host=Host("h1", "10.1.0.2/16"), queues=2),
            Port("p1", ipv4=["10.0.2.1/24"], host=Host("h2", "10.0.2.2/24"), queues=2),
    ], extra={"eal": {"args": eal}, "ina": {"jobs": jobs(64)}}) as tb:
        h1, h2 = tb.hosts["h1"], tb.hosts["h2"]
        h1.wait_reachable(h2.ip)
        status = tb.api_json("GET", "/api/v1/status")
        check(len(status["lcores"]) == 2, f"two worker lcores ({status['lcores']})")
        base = tb.config_dict()
        floods = [h1.popen(["/usr/bin/python3", "-c", FLOODER, h1.dev, str(FLOOD_SECONDS),
                            str(SENDERS), str(k)]) for k in range(2)]
        answers = []

        def put(window: int) -> None:
            cfg = dict(base, ina={"jobs": jobs(window)}, routes=ROUTES)
            t0 = time.monotonic()
            try:
                status, body = tb.http("PUT", "/api/v1/config", to_yaml(cfg), timeout=15)
            except Exception as e:  # a timeout is the deadlock
                status, body = 0, f"no answer: {e}"
            answers.append((window, status, time.monotonic() - t0, body.strip()[:200]))

        try:
            wait_until(lambda: tb.metrics().get("inaswitch_control_events_total") > 1000, 10,
                       "the ARP flood reaching the control plane")
            for _ in range(ROUNDS):
                threads = [threading.Thread(target=put, args=(w,)) for w in (128, 32, 128, 32)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join(30)
            t0 = time.monotonic()
            status, _ = tb.http("GET", "/metrics", timeout=5)
            check(status == 200, f"/metrics answers during the flood ({time.monotonic() - t0:.2f} s)")
        finally:
            sent = sum(int(f.communicate(timeout=FLOOD_SECONDS + 30)[0] or 0) for f in floods)
        m = tb.metrics()
        log(f"flood: {sent} ARP frames from {2 * SENDERS} senders; control events "
            f"{m.get('inaswitch_control_events_total'):.0f} handled, "
            f"{m.get('inaswitch_control_events_lost_total'):.0f} lost")
        for window, status, secs, body in answers:
            log(f"PUT 64 jobs with window {window}: HTTP {status} in {secs:.2f} s {body}")
        check(len(answers) == 4 * ROUNDS and all(s in (200, 422) for _, s, _, _ in answers),
              "every PUT answered (applied or refused with a reason)")
        check(any(s == 200 for _, s, _, _ in answers), "at least one PUT applied")
        h1.wait_reachable(h2.ip)
        tx, rx = h1.ping(h2.ip, count=10, interval=0.05)
        check(rx == tx, f"forwarding continues after the flood ({rx}/{tx})")
        # Every job has exactly its tables: nothing refused or replaced is left in the metrics.
        m = tb.metrics()
        job_ids = set(m.by_label("inaswitch_ina_job_slots", "job"))
        check(job_ids == {str(100 + i) for i in range(64)},
              f"64 jobs with tables, none left over ({len(job_ids)})")
        windows = {a[0] for a in answers if a[1] == 200}
        capacity = m.get("inaswitch_ina_job_slots", job="100")
        # Two entries per slot index; the job's window indices are dealt over the two worker
        # lcores (ina::chunk_place), so the job holds 2 x window entries in all.
        check(any(capacity == 2 * w for w in windows),
              f"job 100's tables are those of an applied PUT (capacity {capacity:.0f})")
        t0 = time.monotonic()
        tb.signal(signal.SIGTERM)
        try:
            tb.proc.wait(5)
        except Exception:
            raise TestFailure("the switch ignored SIGTERM for 5 s") from None
        took = time.monotonic() - t0
        check(took < 1.0, f"SIGTERM stopped the switch in {took:.2f} s (< 1 s)")
        check(tb.proc.returncode == 0, f"clean exit ({tb.proc.returncode})")


if __name__ == "__main__":
    main(test)
