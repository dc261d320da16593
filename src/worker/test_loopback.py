# SPDX-License-Identifier: Apache-2.0
"""ina-worker against ina-ps on loopback (no root, no switch): four workers on 127.0.0.2-5, the
host root on 127.0.0.1, for every element type the tools support and each op, clean and with
injected faults (lost, duplicated and reordered data, lost results). A worker checking against
the wrong reference must fail (the check is not vacuous). Then a worker with no root
must give up at its --timeout-ms with exit 1 and ok=false, not hang.

    python3 test_loopback.py BUILD/src/worker
"""

import json
import os
import subprocess
import sys
import time

N = 4
PORT_BASE = 19470  # not the INA default: loopback tests must not collide with a real worker


def run_case(d, job, port, etype, op, elements, extra=(), expect_ok=True):
    ps = subprocess.Popen([os.path.join(d, "ina-ps"), "--job", str(job), "--abm", f"1-{N}",
                           "--type", etype, "--op", op, "--bind", "127.0.0.1", "--port",
                           str(port), "--idle-exit-ms", "30000", "--workers",
                           ",".join(f"{i}=127.0.0.{i + 1}" for i in range(1, N + 1))],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    workers = []
    try:
        # ina-ps says it is listening on stderr before it polls.
        line = ps.stderr.readline()
        if "listening" not in line:
            raise SystemExit(f"ina-ps did not start: {line!r}")
        for i in range(1, N + 1):
            workers.append(subprocess.Popen(
                [os.path.join(d, "ina-worker"), "--job", str(job), "--bfr-id", str(i), "--abm",
                 f"1-{N}", "--root", "127.0.0.1", "--port", str(port), "--bind",
                 f"127.0.0.{i + 1}", "--type", etype, "--op", op, "--elements", str(elements),
                 "--timeout-ms", "30000", "--seed", str(job), *extra],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        ok = True
        for i, w in enumerate(workers, 1):
            out, err = w.communicate(timeout=60)
            r = json.loads(out.strip().splitlines()[-1])
            good = (w.returncode == 0 and r.get("ok") is True) if expect_ok else \
                (w.returncode == 1 and r.get("ok") is False and r.get("mismatches", 0) > 0)
            ok &= good
            print(f"{'ok' if good else 'FAIL'}: {etype} {op} {' '.join(extra)} worker {i}: "
                  f"{r}{'' if good else ' ' + err}", flush=True)
        ps.terminate()
        out, _ = ps.communicate(timeout=10)
        s = json.loads(out.strip().splitlines()[-1])
        chunks = -(-elements // 256)
        good = s["completed"] == chunks and s["results_sent"] == N * chunks
        print(f"{'ok' if good else 'FAIL'}: ina-ps completed {s['completed']} == {chunks}, "
              f"results_sent {s['results_sent']} == {N * chunks}", flush=True)
        return ok and good
    finally:
        for p in workers + [ps]:
            if p.poll() is None:
                p.kill()
                p.wait(5)


def file_case(d, job, port):
    """Tensors from files (--input) reduced into files (--output): int32 sum of 4 workers'
    files, checked element by element against the wrapping sum computed here."""
    import struct
    import tempfile
    n = 3000
    with tempfile.TemporaryDirectory() as tmp:
        data = {i: [((i * 7919 + k * 104729) % 4294967296) - 2147483648 for k in range(n)]
                for i in range(1, N + 1)}
        for i, values in data.items():
            with open(os.path.join(tmp, f"in{i}"), "wb") as f:
                f.write(struct.pack(f"<{n}i", *values))
        ps = subprocess.Popen([os.path.join(d, "ina-ps"), "--job", str(job), "--abm", f"1-{N}",
                               "--type", "int32", "--op", "sum", "--bind", "127.0.0.1", "--port",
                               str(port), "--idle-exit-ms", "30000", "--workers",
                               ",".join(f"{i}=127.0.0.{i + 1}" for i in range(1, N + 1))],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        workers = []
        try:
            if "listening" not in ps.stderr.readline():
                raise SystemExit("ina-ps did not start")
            for i in range(1, N + 1):
                workers.append(subprocess.Popen(
                    [os.path.join(d, "ina-worker"), "--job", str(job), "--bfr-id", str(i),
                     "--abm", f"1-{N}", "--root", "127.0.0.1", "--port", str(port), "--bind",
                     f"127.0.0.{i + 1}", "--type", "int32", "--op", "sum",
                     "--input", os.path.join(tmp, f"in{i}"),
                     "--output", os.path.join(tmp, f"out{i}"), "--timeout-ms", "30000"],
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
            expected = [((sum(data[i][k] for i in data) + 2147483648) % 4294967296) - 2147483648
                        for k in range(n)]
            ok = True
            for i, w in enumerate(workers, 1):
                out, err = w.communicate(timeout=60)
                with open(os.path.join(tmp, f"out{i}"), "rb") as f:
                    got = list(struct.unpack(f"<{n}i", f.read()))
                good = w.returncode == 0 and got == expected
                ok &= good
                print(f"{'ok' if good else 'FAIL'}: --input/--output worker {i}: result "
                      f"{'equals' if got == expected else 'differs from'} the wrapping sum of "
                      f"the 4 files {err.strip()}", flush=True)
            return ok
        finally:
            for p in workers + [ps]:
                if p.poll() is None:
                    p.kill()
                    p.wait(5)


def main():
    d = sys.argv[1]
    ok = True
    job = 100
    faults = ("--fault-tx-loss", "0.02", "--fault-tx-dup", "0.02", "--fault-reorder", "0.05",
              "--fault-rx-loss", "0.02")
    cases = [(t, "sum", ()) for t in ("int32", "fp32", "fp16", "bf16", "int64", "fp64")]
    cases += [("int32", "prod", ()), ("fp32", "prod", ()), ("fp16", "max", ()),
              ("fp32", "min", ()), ("int32", "sum", faults), ("fp32", "sum", faults)]
    for etype, op, extra in cases:
        job += 1
        ok &= run_case(d, job, PORT_BASE + job % 100, etype, op, 50000, extra)
    # Verification must notice a wrong result: a reference built from BFR-ids 1-3 only.
    job += 1
    ok &= run_case(d, job, PORT_BASE + job % 100, "int32", "sum", 5000,
                   ("--workers-data", "1-3"), expect_ok=False)
    job += 1
    ok &= run_case(d, job, PORT_BASE + job % 100, "fp32", "sum", 5000,
                   ("--workers-data", "1-3"), expect_ok=False)
    job += 1
    ok &= file_case(d, job, PORT_BASE + job % 100)
    # No root: bounded by --timeout-ms, exit 1, ok=false.
    t0 = time.monotonic()
    p = subprocess.run([os.path.join(d, "ina-worker"), "--job", "1", "--bfr-id", "1", "--abm",
                        "1-2", "--root", "127.0.0.1", "--port", str(PORT_BASE + 99), "--bind",
                        "127.0.0.9", "--elements", "1000", "--timeout-ms", "300"],
                       capture_output=True, text=True, timeout=30)
    took = time.monotonic() - t0
    good = p.returncode == 1 and '"ok": false' in p.stdout and took < 10
    print(f"{'ok' if good else 'FAIL'}: no root: exit {p.returncode} after {took:.2f} s: "
          f"{p.stdout.strip()}", flush=True)
    ok &= good
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
