# SPDX-License-Identifier: Apache-2.0
"""e2e-inaswitchctl: the operator CLI (tools/inaswitchctl) against a live switch whose API
speaks TLS with a write token (from a file) and a read token (docs/api.md).

  - status, metrics, jobs list, bier show print tables, and with --json the switch's answer;
  - jobs add (YAML file, JSON on stdin) and delete change the running switch (checked through
    the API itself); an invalid job exits 1 with the switch's api:line:col reason, deleting a
    job that is not there exits 1;
  - bier set / group-add / group-delete, checked in GET /api/v1/bier;
  - rdma show (a server-to-switch job: its session, the last failed one, its deterministic
    mode, its QPs) and rdma disconnect (a rank's QP torn down; an unknown job exits 1 with the
    switch's reason);
  - the metrics summary shows both ports with their link state and the job's slots;
  - exit codes: 4 with the read token for a change and without a token, 3 without the CA (TLS
    verification) and for a port nothing listens on, 2 for usage and a missing token file.
"""

from __future__ import annotations

import json
import os
import secrets
import ssl
import subprocess
import tempfile

from testbed import check, free_tcp_port, log, main
from test_api_security import make_pki, secure_switch
from test_rdma_api import connect_body

# A server-to-switch job whose parameters are test_rdma_api's connect body's.
RDMA_JOB = {"id": 9, "mode": "server-to-switch", "world": 2, "op": "sum", "dtype": "fp32",
            "chunk_bytes": 1024, "window": 64, "pmtu": 1024, "deterministic": True}

CTL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools",
                   "inaswitchctl")

JOB_YAML = """# a job as an operator writes it
job_id: 7
role: aggregator
bsl: 64
abm: "1-2"
op: sum
elem_type: fp32
max_elements: 256
window: 64
root: 10.0.2.2
"""


def test(exe: str) -> None:
    pki = tempfile.mkdtemp(prefix="inae2e-ctl-")
    make_pki(pki)
    ca = ssl.create_default_context(cafile=os.path.join(pki, "ca.crt"))
    write_token, read_token = secrets.token_hex(24), secrets.token_hex(24)
    tokens = {}
    for name, tok in (("write", write_token), ("read", read_token)):
        tokens[name] = os.path.join(pki, f"{name}.token")
        with open(tokens[name], "w") as f:
            f.write(tok + "\n")
    control = {
        "tls": {"cert": os.path.join(pki, "server.crt"), "key": os.path.join(pki, "server.key")},
        "clients": [{"name": "ops", "role": "write", "token_file": tokens["write"]},
                    {"name": "viewer", "role": "read", "token_file": tokens["read"]}],
    }
    job_file = os.path.join(pki, "job.yaml")
    with open(job_file, "w") as f:
        f.write(JOB_YAML)

    with secure_switch(exe, {"control": control, "rdma": {"jobs": [RDMA_JOB]}}, write_token,
                       ca) as tb:
        url = f"https://127.0.0.1:{tb.api_port}"

        def ctl(*args: str, token: str | None = "write", cacert: bool = True,
                stdin: str | None = None, url_: str | None = None) -> subprocess.CompletedProcess:
            cmd = ["/usr/bin/python3", "-B", CTL, "--url", url_ or url]
            if cacert:
                cmd += ["--cacert", os.path.join(pki, "ca.crt")]
            if token:
                cmd += ["--token-file", tokens.get(token, token)]
            r = subprocess.run(cmd + list(args), input=stdin, capture_output=True, text=True,
                               timeout=30, env={k: v for k, v in os.environ.items()
                                                if not k.startswith("INASWITCH_")})
            log(f"inaswitchctl {' '.join(args)} -> {r.returncode}"
                + (f" ({r.stderr.strip()[:300]})" if r.returncode else ""))
            return r

        def ok_json(*args: str, **kw) -> object:
            r = ctl("--json", *args, **kw)
            check(r.returncode == 0, f"inaswitchctl --json {' '.join(args)} exits 0 "
                                     f"({r.returncode}: {r.stderr.strip()})")
            return json.loads(r.stdout)

        # -- reading --------------------------------------------------------------------------
        status = ok_json("status")
        direct = tb.api_json("GET", "/api/v1/status")
        check(set(status) == set(direct) and status["version"] == direct["version"] and
              status["generation"] == direct["generation"] and
              [p["name"] for p in status["ports"]] == ["p0", "p1"],
              f"status --json is the switch's GET /api/v1/status ({status})")
        r = ctl("status")
        check(r.returncode == 0 and "PORT" in r.stdout and "p0" in r.stdout and "p1" in r.stdout
              and f"generation {status['generation']}" in r.stdout,
              f"status prints the ports table and generation:\n{r.stdout}")
        # af_packet computes no checksums on send: the ports say so, and the table with them.
        check([p.get("tx_udp_checksum") for p in status["ports"]] == [False, False] and
              "OFFLOADS" in r.stdout and "tx-udp-csum" not in r.stdout,
              f"af_packet ports report no TX UDP checksum offload:\n{r.stdout}")
        check(ok_json("jobs", "list") == [], "no jobs at first")
        check("no INA jobs" in ctl("jobs", "list").stdout, "jobs list says there are none")

        # -- jobs -------------------------------------------------------------------------------
        r = ctl("jobs", "add", job_file)
        check(r.returncode == 0 and "job added" in r.stdout, f"jobs add FILE ({r.stdout})")
        jobs = tb.api_json("GET", "/api/v1/jobs")
        check([j["job_id"] for j in jobs] == [7] and jobs[0]["root"] == "10.0.2.2",
              f"job 7 runs after jobs add ({jobs})")
        r = ctl("jobs", "list")
        row = next((line.split() for line in r.stdout.splitlines() if line.startswith("7 ")), [])
        check(row[:5] == ["7", "aggregator", jobs[0]["abm"], "sum", "fp32"],
              f"jobs list shows job 7:\n{r.stdout}")
        listed = ok_json("jobs", "list")
        check(listed[0]["stats"]["slots"] > 0, f"jobs list --json has the job's stats ({listed})")
        r = ctl("jobs", "add", "-", stdin=json.dumps(
            {"job_id": 8, "role": "aggregator", "bsl": 64, "abm": "1-2", "op": "sum",
             "elem_type": "fp32", "max_elements": 256, "window": 64, "root": "10.0.2.2"}))
        check(r.returncode == 0, "jobs add - (JSON on stdin)")
        check(sorted(j["job_id"] for j in tb.api_json("GET", "/api/v1/jobs")) == [7, 8],
              "jobs 7 and 8 run")
        r = ctl("jobs", "add", "-", stdin=JOB_YAML.replace('abm: "1-2"', 'abm: "1-99"')
                .replace("job_id: 7", "job_id: 9"))
        check(r.returncode == 1 and "refused" in r.stderr and "api:" in r.stderr,
              f"an invalid job: exit 1 with the switch's api:line:col reason ({r.stderr})")
        check(sorted(j["job_id"] for j in tb.api_json("GET", "/api/v1/jobs")) == [7, 8],
              "the refused job changed nothing")

        metrics = ok_json("metrics")
        check(set(metrics["ports"]) == {"p0", "p1"} and
              all(p.get("link_up") == 1 for p in metrics["ports"].values()),
              f"metrics summary: both ports, links up ({metrics['ports']})")
        check({"7", "8"} <= set(metrics["ina_jobs"]) and
              metrics["ina_jobs"]["7"].get("slots", 0) > 0,
              f"metrics summary: jobs 7 and 8 with their slots ({metrics['ina_jobs']})")
        r = ctl("metrics")
        check(r.returncode == 0 and "job 7: slots in use 0/" in r.stdout,
              f"metrics prints the summary:\n{r.stdout}")

        r = ctl("jobs", "delete", "8")
        check(r.returncode == 0 and [j["job_id"] for j in tb.api_json("GET", "/api/v1/jobs")]
              == [7], f"jobs delete 8 ({r.stdout})")
        r = ctl("jobs", "delete", "8")
        check(r.returncode == 1 and r.stderr.strip(), "deleting a job that is gone: exit 1")

        # -- BIER -------------------------------------------------------------------------------
        r = ctl("bier", "set", "-", stdin=json.dumps({"bfr_id": 50, "bifts": [{"bsl": 64, "local": [
            {"bfr_id": 1, "host": "10.0.1.2"}, {"bfr_id": 2, "host": "10.0.2.2"}]}]}))
        check(r.returncode == 0, "bier set -")
        check(ctl("bier", "group-add", "239.1.1.1", "1,2").returncode == 0, "bier group-add")
        bier = tb.api_json("GET", "/api/v1/bier")
        check(bier.get("bfr_id") == 50 and len(bier["bifts"]) == 1 and
              [g["group"] for g in bier["groups"]] == ["239.1.1.1"],
              f"BIER set through the CLI ({bier})")
        check(ok_json("bier", "show") == bier, "bier show --json is GET /api/v1/bier")
        r = ctl("bier", "show")
        check("BFR-id 50" in r.stdout and f"group 239.1.1.1 -> BFR-ids {bier['groups'][0]['bfr_ids']}" in r.stdout,
              f"bier show:\n{r.stdout}")
        r = ctl("bier", "group-add", "10.1.1.1", "1")
        check(r.returncode == 1, "a unicast address as a group: exit 1")
        check(ctl("bier", "group-delete", "239.1.1.1").returncode == 0 and
              tb.api_json("GET", "/api/v1/bier")["groups"] == [], "bier group-delete")

        # -- rdma -----------------------------------------------------------------------------
        r = ctl("rdma", "show", "9")
        check(r.returncode == 0 and "rdma job 9  server-to-switch  root  world 2" in r.stdout and
              "session: ok  last failed session: none" in r.stdout and
              "deterministic: 32 fraction bits" in r.stdout and
              "no QPs connected" in r.stdout, f"rdma show, no QP yet:\n{r.stdout}")
        status, text = tb.http("POST", "/api/v1/rdma/jobs/9/connect", connect_body(1, "10.0.1.2"))
        check(status == 200, f"a worker's connect ({status} {text[:200]})")
        r = ctl("rdma", "show", "9")
        row = next((line.split() for line in r.stdout.splitlines() if line.startswith("1 ")), [])
        check(r.returncode == 0 and "RANK" in r.stdout and row[2:6] == ["17", "10.0.1.2", "api",
                                                                         "ready"],
              f"rdma show lists rank 1's QP (worker QPN 17 at 10.0.1.2, from the API, ready):\n"
              f"{r.stdout}")
        check(ok_json("rdma", "show", "9") == tb.api_json("GET", "/api/v1/rdma/jobs/9"),
              "rdma show --json is GET /api/v1/rdma/jobs/9")
        r = ctl("rdma", "disconnect", "9", "1", token="read")
        check(r.returncode == 4, f"rdma disconnect with the read token: exit 4 ({r.stderr})")
        r = ctl("rdma", "disconnect", "9", "1")
        check(r.returncode == 0 and "rank 1 of rdma job 9 disconnected" in r.stdout and
              tb.api_json("GET", "/api/v1/rdma/jobs/9")["qps"] == [],
              f"rdma disconnect tears the QP down ({r.stdout})")
        r = ctl("rdma", "disconnect", "9", "1")
        check(r.returncode == 1 and "404" in r.stderr, f"again: the switch's 404 ({r.stderr})")
        r = ctl("rdma", "show", "99")
        check(r.returncode == 1 and "99" in r.stderr, f"an unknown rdma job: exit 1 ({r.stderr})")

        # -- errors and exit codes --------------------------------------------------------------
        r = ctl("jobs", "delete", "7", token="read")
        check(r.returncode == 4 and "403" in r.stderr and "write" in r.stderr,
              f"read token changing something: exit 4 with the reason ({r.stderr})")
        check([j["job_id"] for j in tb.api_json("GET", "/api/v1/jobs")] == [7],
              "the refused delete changed nothing")
        check(ctl("status", token="read").returncode == 0, "read token reads")
        r = ctl("status", token=None)
        check(r.returncode == 4 and "401" in r.stderr, f"no token: exit 4 ({r.stderr})")
        r = ctl("status", cacert=False)
        check(r.returncode == 3 and "TLS" in r.stderr, f"unverified server: exit 3 ({r.stderr})")
        r = ctl("status", url_=f"https://127.0.0.1:{free_tcp_port()}")
        check(r.returncode == 3 and "cannot reach" in r.stderr, "nothing listening: exit 3")
        r = ctl("status", token=os.path.join(pki, "missing.token"))
        check(r.returncode == 2 and "token file" in r.stderr, "a missing token file: exit 2")
        r = ctl("jobs", "frobnicate")
        check(r.returncode == 2, "an unknown subcommand: exit 2")
        check(ctl("--json", "status", token=None).stdout == "",
              "--json prints nothing on stdout for an error")


if __name__ == "__main__":
    main(test)
