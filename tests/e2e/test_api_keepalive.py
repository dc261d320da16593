# SPDX-License-Identifier: Apache-2.0
"""e2e-api-keepalive: kept-alive API connections, and the workers' stall accounting.

With one API worker thread (control.threads: 1):
  - three requests sent in one piece on one connection (pipelined) are answered in order;
  - 300 route changes one at a time on one connection are all answered on that same
    connection (the worker serves each next request itself);
  - a kept-alive connection that goes quiet does not keep a second client from being answered
    (within a deadline), and still works afterwards;
  - a POST with "Expect: 100-continue" gets its interim answer before it sends the body.
The stall series: every worker loop iteration is classified once, as the switch's own work
(inaswitch_lcore_loop_work_total) or as descheduled (inaswitch_lcore_loop_descheduled_total),
so their sum follows inaswitch_lcore_loops_total; the worker thread's context switches (the
testbed's idle back-off sleeps are voluntary ones) and run-queue wait come from /proc.
"""

import json
import re
import socket
import time

from testbed import TestFailure, check, log, main, two_subnets


def read_answer(sock: socket.socket, buf: bytearray, deadline: float) -> tuple[int, dict, str]:
    """One HTTP answer from `sock` (bytes past it stay in `buf`): status, body JSON, head."""
    while True:
        end = buf.find(b"\r\n\r\n")
        if end >= 0:
            head = buf[:end].decode()
            m = re.search(r"(?im)^content-length:\s*(\d+)", head)
            if m is None:
                raise TestFailure(f"answer without Content-Length: {head!r}")
            total = end + 4 + int(m.group(1))
            if len(buf) >= total:
                body = bytes(buf[end + 4:total])
                del buf[:total]
                return int(head.split()[1]), json.loads(body or b"{}"), head
        left = deadline - time.monotonic()
        if left <= 0:
            raise TestFailure("no complete answer before the deadline")
        sock.settimeout(left)
        chunk = sock.recv(65536)
        if not chunk:
            raise TestFailure("the switch closed a kept-alive connection")
        buf += chunk


def post_route(prefix: str) -> bytes:
    body = json.dumps({"prefix": prefix, "via": "10.0.2.2"}).encode()
    return (b"POST /api/v1/routes HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body)) + body


def delete_route(prefix: str) -> bytes:
    return b"DELETE /api/v1/routes?prefix=%s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" % prefix.encode()


def samples(text: str, name: str) -> list[tuple[str, float]]:
    return [(line[len(name):line.rindex(" ")], float(line.split()[-1]))
            for line in text.splitlines() if line.startswith(name + "{")]


def total(text: str, name: str, contains: str = "") -> float:
    return sum(v for labels, v in samples(text, name) if contains in labels)


def test(exe: str) -> None:
    with two_subnets(exe, extra={"control": {"threads": 1}}) as tb:
        port = tb.api_port
        # Pipelined: three requests in one send.
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            buf = bytearray()
            s.sendall(post_route("10.70.0.0/24") + delete_route("10.70.0.0/24") +
                      b"GET /api/v1/status HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            deadline = time.monotonic() + 10
            answers = [read_answer(s, buf, deadline) for _ in range(3)]
            check(answers[0][0] == 200 and answers[0][1].get("ok") is True,
                  f"pipelined POST applied ({answers[0][:2]})")
            check(answers[1][0] == 200 and answers[1][1].get("ok") is True,
                  f"pipelined DELETE applied ({answers[1][:2]})")
            check(answers[2][0] == 200 and "generation" in json.dumps(answers[2][1]),
                  f"pipelined GET answered with the status ({answers[2][0]})")

            # One at a time on the same connection: a close would fail read_answer.
            deadline = time.monotonic() + 60
            for i in range(150):
                for req in (post_route(f"10.71.{i}.0/24"), delete_route(f"10.71.{i}.0/24")):
                    s.sendall(req)
                    status, body, head = read_answer(s, buf, deadline)
                    if status != 200 or body.get("ok") is not True:
                        raise TestFailure(f"change {i} refused: {status} {body}")
                    if re.search(r"(?im)^connection:\s*close", head):
                        raise TestFailure(f"change {i}: the switch closes the connection")
            log("300 changes answered on one kept-alive connection")

            # This connection now idles; a second client is still served, by the one worker.
            t0 = time.monotonic()
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s2:
                buf2 = bytearray()
                s2.sendall(b"GET /api/v1/status HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                status, _, _ = read_answer(s2, buf2, time.monotonic() + 2)
            waited = time.monotonic() - t0
            check(status == 200 and waited < 2,
                  f"a second client answered while the first idles ({waited * 1e3:.1f} ms)")
            s.sendall(post_route("10.72.0.0/24"))
            status, body, _ = read_answer(s, buf, time.monotonic() + 5)
            check(status == 200 and body.get("ok") is True,
                  "the idle kept-alive connection still works afterwards")

        # Expect: 100-continue: the interim answer is sent before the switch waits for the body
        # (answers are gathered into one write; this one must not wait in the buffer).
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s3:
            body = json.dumps({"prefix": "10.73.0.0/24", "via": "10.0.2.2"}).encode()
            s3.sendall(b"POST /api/v1/routes HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                       b"application/json\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n"
                       % len(body))
            interim = bytearray()
            s3.settimeout(2)
            while b"\r\n\r\n" not in interim:
                chunk = s3.recv(4096)
                if not chunk:
                    raise TestFailure("closed before the interim answer")
                interim += chunk
            check(interim.startswith(b"HTTP/1.1 100"), f"100 Continue first ({bytes(interim)!r})")
            s3.sendall(body)
            buf3 = interim[interim.index(b"\r\n\r\n") + 4:]
            status, answer, _ = read_answer(s3, buf3, time.monotonic() + 5)
            check(status == 200 and answer.get("ok") is True, "the change after 100 Continue applied")

        # Stall accounting: each iteration counted once, as work or as descheduled.
        text0 = tb.metrics_text()
        time.sleep(0.5)  # a measurement interval, not synchronisation
        text1 = tb.metrics_text()
        loops = [total(t, "inaswitch_lcore_loops_total") for t in (text0, text1)]
        split = [total(t, "inaswitch_lcore_loop_work_total") +
                 total(t, "inaswitch_lcore_loop_descheduled_total") for t in (text0, text1)]
        check(loops[1] > loops[0], f"the worker loops ({loops[1] - loops[0]:.0f} iterations)")
        # Read one lcore's block at a scrape: at most the iterations of the copy apart.
        check(all(abs(lo - sp) <= 1000 for lo, sp in zip(loops, split)),
              f"loop_work + loop_descheduled follows loops_total ({split} vs {loops})")
        detecting = total(text1, "inaswitch_lcore_deschedule_detection")
        log(f"deschedule detection: {detecting:.0f}; involuntary context switches "
            f"{total(text1, 'inaswitch_lcore_context_switches_total', 'involuntary'):.0f}")
        voluntary = [total(t, "inaswitch_lcore_context_switches_total", '"voluntary"')
                     for t in (text0, text1)]
        check(voluntary[1] > voluntary[0],
              f"the worker's idle back-off sleeps show as voluntary switches ({voluntary})")
        check(samples(text1, "inaswitch_lcore_run_delay_seconds_total") != [],
              "the worker's run-queue wait is exported")
        if detecting:
            # Its sleeps are the loop's own: never counted as a descheduled iteration's.
            sleeps = total(text1, "inaswitch_lcore_idle_sleeps_total") - \
                total(text0, "inaswitch_lcore_idle_sleeps_total")
            desched = total(text1, "inaswitch_lcore_loop_descheduled_total") - \
                total(text0, "inaswitch_lcore_loop_descheduled_total")
            involuntary = total(text1, "inaswitch_lcore_context_switches_total", "involuntary") - \
                total(text0, "inaswitch_lcore_context_switches_total", "involuntary")
            check(desched <= involuntary + 1000 and sleeps > desched,
                  f"idle sleeps ({sleeps:.0f}) are not descheduled iterations ({desched:.0f}, "
                  f"{involuntary:.0f} preemptions)")


if __name__ == "__main__":
    main(test)
