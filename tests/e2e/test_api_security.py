# SPDX-License-Identifier: Apache-2.0
"""e2e-api-security: the control API's authentication, TLS, limits and audit log (issue 9.7).

A switch whose API speaks TLS (a CA, server and client certificates made here with the
openssl CLI) with two bearer tokens (a write token from a file, a read token as its SHA-256)
and a metrics listener of its own:
  - no token: 401 with a JSON body; the read token GETs but a PUT or POST is 403; the write
    token PUTs the running config back (200);
  - the TLS handshake verifies with the CA and fails without it; plain HTTP gets no answer;
  - a 100 MB body (curl, and a bare Content-Length) is 413 with a JSON body naming the limit,
    a chunked body 411, a gzip one 415, and a >8 KB config PUT with the documented
    `curl --data-binary` command is applied;
  - text/plain POST: 415; a write from a foreign Origin: 403; a repeated or unknown query
    parameter: 400 (DELETE ?job_id=1&job_id=2 deletes neither job); invalid UTF-8 in a body:
    4xx with a JSON body;
  - 16 slowloris clients (from 127.0.0.2) neither stop /metrics on the metrics listener nor an
    authenticated API call from answering within 1 s, a 17th connection from that address
    takes the place of its oldest slow one, and the slow ones are cut at header_timeout_ms;
  - the audit log has exactly one line per change request, names the client, never a token.
Then a second switch requires client certificates (mTLS): no certificate fails the handshake,
CN "ops" (role write) changes a route, CN "intruder" of the same CA gets 401.
"""

from __future__ import annotations

import gzip
import hashlib
import http.client
import json
import os
import secrets
import socket
import ssl
import subprocess
import tempfile
import threading
import time
from typing import Any

from testbed import (Host, Port, Testbed, check, free_tcp_port, log, main, request_body, to_yaml,
                     wait_until)

HEADER_TIMEOUT_MS = 2000
MAX_BODY = 1 << 20  # the default control.max_body_bytes


def openssl(*args: str, cwd: str) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_pki(d: str) -> None:
    """ca.crt signs server.crt (IP 127.0.0.1), ops.crt and intruder.crt; rogue.crt is a CA
    nobody trusts."""
    for ca in ("ca", "rogue"):
        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
                f"/CN=inaswitch test {ca}", "-keyout", f"{ca}.key", "-out", f"{ca}.crt", cwd=d)
    with open(os.path.join(d, "server.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\n")
    leaves = [("server", "127.0.0.1", "ca", "server.ext"), ("ops", "ops", "ca", None),
              ("intruder", "intruder", "ca", None)]
    for name, cn, ca, ext in leaves:
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={cn}", "-keyout",
                f"{name}.key", "-out", f"{name}.csr", cwd=d)
        cmd = ["x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
               "-CAcreateserial", "-days", "2", "-out", f"{name}.crt"]
        if ext:
            cmd += ["-extfile", ext]
        openssl(*cmd, cwd=d)


class SecureTestbed(Testbed):
    """The testbed, its API over HTTPS with a bearer token (self.token) by default."""

    ctx: ssl.SSLContext
    token: str = ""

    def request(self, method: str, path: str, *, body: bytes | None = None,
                headers: dict[str, str] | None = None, token: str | None = None,
                ctx: ssl.SSLContext | None = None, port: int | None = None,
                timeout: float = 5) -> tuple[int, dict[str, str], str]:
        conn = http.client.HTTPSConnection("127.0.0.1", port or self.api_port,
                                           context=ctx or self.ctx, timeout=timeout)
        h = dict(headers or {})
        tok = self.token if token is None else token
        if tok:
            h["Authorization"] = f"Bearer {tok}"
        try:
            conn.request(method, path, body=body, headers=h)
            r = conn.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, \
                r.read().decode(errors="replace")
        finally:
            conn.close()

    def http(self, method: str, path: str, body: Any = None,
             timeout: float = 5) -> tuple[int, str]:
        data, headers = request_body(body)
        status, _, text = self.request(method, path, body=data, headers=headers, timeout=timeout)
        return status, text


def json_error(text: str) -> list[str]:
    """The errors of a JSON error body; fails the test if the body is not one."""
    try:
        body = json.loads(text)
    except ValueError:
        check(False, f"error answer has a JSON body (got {text!r:.200})")
    check(isinstance(body, dict) and body.get("ok") is False and body.get("errors"),
          f"error body is {{ok: false, errors: [...]}} ({body})")
    return body["errors"]


def job(job_id: int, abm: str) -> dict:
    return {"job_id": job_id, "role": "aggregator", "bsl": 64, "abm": abm, "op": "sum",
            "elem_type": "fp32", "max_elements": 256, "window": 64, "root": "10.0.2.2"}


def secure_switch(exe: str, extra: dict, token: str, ctx: ssl.SSLContext) -> SecureTestbed:
    """h1 10.0.1.2/24 - p0 [switch] p1 - h2 10.0.2.2/24, the API as `extra` configures it."""
    tb = SecureTestbed(exe, [
        Port("p0", ipv4=["10.0.1.1/24"], host=Host("h1", "10.0.1.2/24")),
        Port("p1", ipv4=["10.0.2.1/24"], host=Host("h2", "10.0.2.2/24")),
    ], start=False, extra=extra)
    tb.ctx = ctx
    tb.token = token
    tb.api = f"https://127.0.0.1:{tb.api_port}"
    try:
        tb.start()
    except BaseException:
        tb.close()
        raise
    return tb


def test(exe: str) -> None:
    pki = tempfile.mkdtemp(prefix="inae2e-pki-")
    make_pki(pki)
    ca = ssl.create_default_context(cafile=os.path.join(pki, "ca.crt"))
    write_token, read_token = secrets.token_hex(24), secrets.token_hex(24)
    write_token_file = os.path.join(pki, "write.token")
    with open(write_token_file, "w") as f:
        f.write(write_token + "\n")
    audit_path = os.path.join(pki, "audit.log")
    metrics_port = free_tcp_port()
    control = {  # control.listen: the testbed's port
        "metrics_listen": f"127.0.0.1:{metrics_port}",
        "tls": {"cert": os.path.join(pki, "server.crt"), "key": os.path.join(pki, "server.key")},
        "clients": [
            {"name": "automation", "role": "write", "token_file": write_token_file},
            {"name": "dashboard", "role": "read",
             "token_sha256": hashlib.sha256(read_token.encode()).hexdigest()},
        ],
        "header_timeout_ms": HEADER_TIMEOUT_MS,
        "audit_log": audit_path,
    }
    writes = 0  # change requests sent: the audit log must have one line each

    jobs = {"jobs": [job(1, "1-2"), job(2, "3-4")]}

    with secure_switch(exe, {"control": control, "ina": jobs}, write_token, ca) as tb:
        # -- authentication and roles --------------------------------------------------------
        status, headers, text = tb.request("GET", "/api/v1/status", token="")
        check(status == 401 and "bearer" in headers.get("www-authenticate", "").lower(),
              f"no token: 401 with WWW-Authenticate ({status})")
        json_error(text)
        status, _, text = tb.request("GET", "/api/v1/status", token="x" * 48)
        check(status == 401, f"unknown token: 401 ({status})")
        status, _, text = tb.request("GET", "/api/v1/status", token=read_token)
        check(status == 200 and "generation" in json.loads(text), f"read token GETs ({status})")
        status, _, text = tb.request("PUT", "/api/v1/config", token=read_token,
                                     body=to_yaml(tb.api_json("GET", "/api/v1/config")).encode(),
                                     headers={"Content-Type": "application/yaml"})
        writes += 1
        check(status == 403, f"read token PUT /api/v1/config: 403 ({status} {text})")
        json_error(text)
        status, _, text = tb.request("POST", "/api/v1/routes", token=read_token,
                                     body=b'{"prefix":"10.9.0.0/16","via":"10.0.2.2"}',
                                     headers={"Content-Type": "application/json"})
        writes += 1
        check(status == 403, f"read token POST /api/v1/routes: 403 ({status})")
        status, text = tb.http("PUT", "/api/v1/config", to_yaml(tb.api_json("GET", "/api/v1/config")))
        writes += 1
        check(status == 200, f"write token PUTs the running config back: {status} {text}")
        check(tb.api_json("GET", "/api/v1/config")["control"]["clients"][0].get("token_file") ==
              write_token_file and write_token not in tb.http("GET", "/api/v1/config")[1],
              "GET /api/v1/config names the token file, never the token")

        # -- TLS -----------------------------------------------------------------------------
        try:
            tb.request("GET", "/api/v1/status", ctx=ssl.create_default_context())
            check(False, "a client without the CA must not complete the TLS handshake")
        except ssl.SSLCertVerificationError as e:
            log(f"without the CA: {e.verify_message}")
        with socket.create_connection(("127.0.0.1", tb.api_port), timeout=5) as s:
            s.sendall(b"GET /api/v1/status HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            try:
                got = s.recv(4096)
            except (ConnectionResetError, socket.timeout):
                got = b""
            check(not got.startswith(b"HTTP/"), f"plain HTTP to the TLS port gets no answer ({got[:40]!r})")

        # -- sizes ---------------------------------------------------------------------------
        big = os.path.join(pki, "big.yaml")
        with open(big, "wb") as f:
            f.write(b"#" * (100 << 20))
        curl = ["curl", "-sS", "--cacert", os.path.join(pki, "ca.crt"), "-H",
                f"Authorization: Bearer {write_token}", "-H", "Content-Type: application/yaml",
                "-o", "-", "-w", "\n%{http_code}", "-X", "PUT"]
        out = subprocess.run(curl + ["--data-binary", f"@{big}", f"{tb.api}/api/v1/config"],
                             capture_output=True, text=True, timeout=60)
        writes += 1
        body, _, code = out.stdout.rpartition("\n")
        check(code == "413", f"curl PUT of 100 MB: 413 ({code}; {out.stderr.strip()})")
        errors = json_error(body)
        check(str(MAX_BODY) in errors[0], f"the 413 names the limit ({errors})")
        status, _, text = tb.request("PUT", "/api/v1/config",
                                     headers={"Content-Type": "application/yaml",
                                              "Content-Length": str(100 << 20)}, body=None)
        writes += 1
        check(status == 413 and str(MAX_BODY) in json_error(text)[0],
              f"Content-Length 100 MB without a body: 413 before reading ({status})")
        os.unlink(big)
        status, _, text = tb.request("PUT", "/api/v1/config", body=iter([b"#" * 4096] * 512),
                                     headers={"Content-Type": "application/yaml",
                                              "Transfer-Encoding": "chunked"})
        writes += 1
        check(status == 411, f"a chunked body (no length to check): 411 ({status})")
        json_error(text)
        status, _, text = tb.request("PUT", "/api/v1/config", body=gzip.compress(b"#" * (64 << 20)),
                                     headers={"Content-Type": "application/yaml",
                                              "Content-Encoding": "gzip"})
        writes += 1
        check(status == 415, f"a gzip body (64 MB inflated): 415 ({status})")
        json_error(text)

        cfg = tb.api_json("GET", "/api/v1/config")
        text = to_yaml(cfg)
        padding = "".join(f"# padding line {i:04d} to make the file larger than 8 KB\n"
                          for i in range(200))
        with open(os.path.join(pki, "switch.yaml"), "w") as f:
            f.write(padding + text)
        check(len(padding + text) > 8192, "the config file is over 8 KB")
        out = subprocess.run(curl + ["--data-binary", f"@{os.path.join(pki, 'switch.yaml')}",
                                     f"{tb.api}/api/v1/config"],
                             capture_output=True, text=True, timeout=30)
        writes += 1
        body, _, code = out.stdout.rpartition("\n")
        check(code == "200" and json.loads(body)["ok"],
              f"curl --data-binary @config (>8 KB): 200 ({code} {body.strip()} {out.stderr})")

        # -- headers and parameters ----------------------------------------------------------
        status, _, text = tb.request("POST", "/api/v1/routes",
                                     body=b'{"prefix":"10.9.0.0/16","via":"10.0.2.2"}',
                                     headers={"Content-Type": "text/plain"})
        writes += 1
        check(status == 415, f"text/plain POST: 415 ({status})")
        json_error(text)
        status, _, text = tb.request("POST", "/api/v1/routes",
                                     body=b'{"prefix":"10.9.0.0/16","via":"10.0.2.2"}',
                                     headers={"Content-Type": "application/json",
                                              "Origin": "https://evil.example"})
        writes += 1
        check(status == 403, f"a write from a foreign Origin: 403 ({status})")
        json_error(text)
        check(all(r["prefix"] != "10.9.0.0/16" for r in tb.api_json("GET", "/api/v1/routes")),
              "neither refused POST added the route")

        status, _, text = tb.request("DELETE", "/api/v1/jobs?job_id=1&job_id=2")
        writes += 1
        check(status == 400, f"DELETE ?job_id=1&job_id=2: 400 ({status} {text})")
        json_error(text)
        ids = sorted(j["job_id"] for j in tb.api_json("GET", "/api/v1/jobs"))
        check(ids == [1, 2], f"both jobs still there ({ids})")
        status, _, text = tb.request("DELETE", "/api/v1/jobs?job_id=1&force=1")
        writes += 1
        check(status == 400 and "force" in json_error(text)[0], f"unknown parameter: 400 ({status})")
        status, _, text = tb.request("GET", "/api/v1/status?verbose=1")
        check(status == 400, f"GET with an unknown parameter: 400 ({status})")

        status, _, text = tb.request("POST", "/api/v1/jobs", body=b'{"job_id": 9, "role": "\xff\xfe"}',
                                     headers={"Content-Type": "application/json"})
        writes += 1
        check(400 <= status < 500, f"invalid UTF-8 in a job: 4xx ({status})")
        log(f"invalid UTF-8: {status} {json_error(text)}")
        status, _, text = tb.request("PUT", "/api/v1/config", body=b"version: 1\nports: [\xff]\n",
                                     headers={"Content-Type": "application/yaml"})
        writes += 1
        check(400 <= status < 500, f"invalid UTF-8 in a config: 4xx ({status})")
        json_error(text)

        # -- metrics listener ----------------------------------------------------------------
        status, _, text = tb.request("GET", "/metrics", port=metrics_port, token=read_token)
        check(status == 200 and "inaswitch_config_generation" in text,
              f"metrics listener: GET /metrics with the read token ({status})")
        status, _, text = tb.request("GET", "/metrics", port=metrics_port, token="")
        check(status == 401, f"metrics listener without a token: 401 ({status})")
        status, _, text = tb.request("GET", "/api/v1/config", port=metrics_port, token=read_token)
        check(status == 404, f"metrics listener serves /metrics only: 404 ({status})")
        json_error(text)

        # -- slowloris -----------------------------------------------------------------------
        slow: list[ssl.SSLSocket] = []

        def slow_client() -> ssl.SSLSocket:
            raw = socket.socket()
            raw.bind(("127.0.0.2", 0))
            raw.settimeout(5)
            raw.connect(("127.0.0.1", tb.api_port))
            s = ca.wrap_socket(raw, server_hostname="127.0.0.1")
            s.sendall(b"GET /api/v1/status HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            return s

        def closed_by_server(s: ssl.SSLSocket) -> bool:
            try:
                data = s.recv(4096)
                return data == b"" or data.startswith(b"HTTP/1.1 408")
            except TimeoutError:
                return False  # still open
            except (ssl.SSLError, OSError):
                return True

        for _ in range(16):  # control.max_connections_per_client
            slow.append(slow_client())
        opened = time.monotonic()
        try:
            # At the per-client limit a new connection takes the oldest incomplete one's place.
            slow.append(slow_client())
            slow[0].settimeout(2)
            check(closed_by_server(slow[0]),
                  "a 17th connection from 127.0.0.2 replaces that client's oldest slow one")
            for round_ in range(3):
                for s in slow[1:]:
                    s.sendall(b"X-Slow: 1\r\n")
                t0 = time.monotonic()
                status, _, text = tb.request("GET", "/metrics", port=metrics_port,
                                             token=read_token, timeout=2)
                t_metrics = time.monotonic() - t0
                t0 = time.monotonic()
                status2, _, _ = tb.request("GET", "/api/v1/status", timeout=2)
                t_api = time.monotonic() - t0
                check(status == 200 and t_metrics < 1.0,
                      f"/metrics answers beside 16 slow clients ({status}, {t_metrics:.3f} s)")
                check(status2 == 200 and t_api < 1.0,
                      f"an authenticated API call answers beside 16 slow clients "
                      f"({status2}, {t_api:.3f} s)")
                log(f"round {round_}: /metrics {t_metrics * 1000:.0f} ms, API {t_api * 1000:.0f} ms")

            for s in slow[1:]:
                s.settimeout(HEADER_TIMEOUT_MS / 1000 + 3)
            check(all(closed_by_server(s) for s in slow[1:]), "the slow clients are cut")
            waited = time.monotonic() - opened
            check(waited < HEADER_TIMEOUT_MS / 1000 + 2,
                  f"slow clients cut at header_timeout_ms ({waited:.1f} s)")
        finally:
            for s in slow:
                s.close()

        # -- audit log -----------------------------------------------------------------------
        def audit_lines() -> list[dict]:
            with open(audit_path) as f:
                return [json.loads(line) for line in f if line.strip()]
        wait_until(lambda: len(audit_lines()) >= writes, 5, f"{writes} audit lines")
        lines = audit_lines()
        check(len(lines) == writes, f"one audit line per change request ({len(lines)} for {writes})")
        for e in lines:
            check({"time", "client", "principal", "method", "path", "status", "result"} <= e.keys(),
                  f"audit line has who/where/what/result ({e})")
        principals = {e["principal"] for e in lines}
        check({"automation", "dashboard"} <= principals, f"audit names the clients ({principals})")
        refused = [e for e in lines if e["path"] == "/api/v1/jobs" and e["method"] == "DELETE"]
        check(refused and all(e["status"] == 400 and e["result"] == "refused" for e in refused),
              "the refused DELETE is audited as refused")
        with open(audit_path) as f:
            audit_text = f.read()
        for tok in (write_token, read_token):
            check(tok not in audit_text and tok not in tb.switch_log(), "no token in any log")

    # -- mutual TLS ------------------------------------------------------------------------------
    mtls = dict(control)
    mtls["tls"] = dict(control["tls"], client_ca=os.path.join(pki, "ca.crt"))
    mtls["clients"] = [{"name": "ops-cert", "role": "write", "cert_cn": "ops"}]
    mtls.pop("metrics_listen")
    os.unlink(audit_path)
    ops = ssl.create_default_context(cafile=os.path.join(pki, "ca.crt"))
    ops.load_cert_chain(os.path.join(pki, "ops.crt"), os.path.join(pki, "ops.key"))
    with secure_switch(exe, {"control": mtls}, "", ops) as tb:
        def handshake_refused(ctx: ssl.SSLContext, what: str) -> None:
            try:
                tb.request("GET", "/api/v1/status", ctx=ctx)
            except (ssl.SSLError, ConnectionResetError, BrokenPipeError,
                    http.client.RemoteDisconnected) as e:
                log(f"{what}: handshake refused: {e}")
                return
            check(False, f"{what}: the TLS handshake must fail")

        handshake_refused(ca, "no client certificate")
        rogue = ssl.create_default_context(cafile=os.path.join(pki, "ca.crt"))
        rogue.load_cert_chain(os.path.join(pki, "rogue.crt"), os.path.join(pki, "rogue.key"))
        handshake_refused(rogue, "a certificate from an unknown CA")
        intruder = ssl.create_default_context(cafile=os.path.join(pki, "ca.crt"))
        intruder.load_cert_chain(os.path.join(pki, "intruder.crt"), os.path.join(pki, "intruder.key"))
        status, _, _ = tb.request("GET", "/api/v1/status", ctx=intruder)
        check(status == 401, f"CN intruder (same CA, not a client): 401 ({status})")
        status, text = tb.http("POST", "/api/v1/routes", {"prefix": "10.9.0.0/16", "via": "10.0.2.2"})
        check(status == 200, f"CN ops (role write) adds a route: {status} {text}")
        with open(audit_path) as f:
            entry = json.loads(f.readlines()[-1])
        check(entry["principal"] == "ops-cert" and entry.get("cert_cn") == "ops",
              f"audit names the certificate client ({entry})")


if __name__ == "__main__":
    main(test)
