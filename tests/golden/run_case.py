# SPDX-License-Identifier: Apache-2.0
"""Runs one golden pcap case through the whole switch and checks its outputs.

    run_case.py CASE_DIR --binary PATH/TO/inaswitch [--workdir DIR] [--timeout S]

CASE_DIR holds (see README.md):
  case.yaml             description, ports, expected metrics, optional unordered_ports
  config.yaml           switch config; @IN_<port>@ / @OUT_<port>@ / @WORKDIR@ are substituted
  in_<port>.pcap        frames the port receives (absent: the port receives nothing)
  expect_<port>.pcap    frames the port must send, in order (absent: it must send nothing)
  async_<port>.pcap     optional: frames the control plane sends on the port (ARP requests),
                        which may appear at any position among the ordered ones

Exit status: 0 pass, 1 the switch's behaviour differs from the case, 2 the case or the run
itself is broken (bad case files, the switch failed to start, crashed or timed out).
"""

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile

import yaml

sys.dont_write_bytecode = True  # run from the source tree: leave no __pycache__ there
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pcapio import PcapError, read_pcap, write_pcap  # noqa: E402

# Families whose series must be 0 unless case.yaml lists them: a case states every drop,
# every routed/flooded/answered packet and every ARP request it causes, and nothing else may
# happen silently. A case may replace the list with its own `zero_unless_listed`.
DEFAULT_ZERO_UNLESS_LISTED = [
    "inaswitch_drops_total",
    "inaswitch_routed_packets_total",
    "inaswitch_bridged_packets_total",
    "inaswitch_flooded_packets_total",
    "inaswitch_arp_replies_total",
    "inaswitch_arp_requests_sent_total",
    "inaswitch_arp_requests_failed_total",
    "inaswitch_icmp_echo_replies_total",
    "inaswitch_control_events_lost_total",
    "inaswitch_port_tx_dropped_total",
    "inaswitch_table_full_total",
]

CASE_KEYS = {"description", "ports", "metrics", "unordered_ports", "zero_unless_listed"}
MAX_SHOWN = 6  # mismatching packets shown per port


class CaseError(Exception):
    """The case itself (or the run) is broken, as opposed to the switch misbehaving."""


# ---------------------------------------------------------------------------------------------
# Metrics

_LABEL_RE = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"\s*(?:,|$)')


def canonical_series(key):
    """'name{b="2",a="1"}' -> 'name{a="1",b="2"}': label order does not matter."""
    key = key.strip()
    if "{" not in key:
        return key
    name, rest = key.split("{", 1)
    if not rest.endswith("}"):
        raise CaseError(f"bad metric series '{key}': expected name{{label=\"value\",...}}")
    body = rest[:-1]
    labels = []
    pos = 0
    while pos < len(body):
        m = _LABEL_RE.match(body, pos)
        if not m:
            raise CaseError(f"bad labels in metric series '{key}'")
        labels.append((m.group(1), m.group(2)))
        pos = m.end()
    labels.sort()
    return name.strip() + "{" + ",".join(f'{k}="{v}"' for k, v in labels) + "}"


def family_of(series):
    return series.split("{", 1)[0]


def parse_metrics(text):
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        series, _, value = line.rpartition(" ")
        out[canonical_series(series)] = float(value)
    return out


# ---------------------------------------------------------------------------------------------
# Explaining packets

_scapy = None


def scapy():
    global _scapy
    if _scapy is None:
        import logging
        logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
        import scapy.all as s  # noqa: F401 (heavy import, only when something failed)
        _scapy = s
    return _scapy


def summary(frame):
    try:
        return scapy().Ether(frame).summary()
    except Exception as e:  # a malformed frame must not hide the diff
        return f"<undecodable: {e}>"


def hexdump(frame):
    lines = []
    for off in range(0, len(frame), 16):
        chunk = frame[off:off + 16]
        hexpart = " ".join(f"{b:02x}" for b in chunk)
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"      {off:04x}  {hexpart:<47}  {text}")
    return "\n".join(lines)


def describe_field(frame, offset):
    """Names the header field(s) covering byte `offset` as scapy dissects the frame, e.g.
    'IP.ttl' or 'IP.version/ihl'. None if it cannot tell."""
    s = scapy()
    from scapy.fields import _BitField
    try:
        layer = s.Ether(frame)
    except Exception:
        return None
    base = 0
    while layer is not None and not isinstance(layer, s.NoPayload):
        hdr_len = len(layer) - len(layer.payload)
        if base <= offset < base + hdr_len:
            rel = offset - base
            names = []
            bitpos = 0
            try:
                for f in layer.fields_desc:
                    if isinstance(f, _BitField):
                        width = f.size
                    else:
                        width = 8 * len(f.addfield(layer, b"", layer.getfieldval(f.name)))
                    if width and bitpos // 8 <= rel <= (bitpos + width - 1) // 8:
                        names.append(f.name)
                    bitpos += width
            except Exception:
                pass
            return f"{layer.name}.{'/'.join(names)}" if names else layer.name
        base += hdr_len
        layer = layer.payload
    return None


def explain_pair(index, expected, got):
    out = [f"    packet {index}:"]
    out.append(f"      expected ({len(expected)} B): {summary(expected)}")
    out.append(f"      got      ({len(got)} B): {summary(got)}")
    diff_at = next((i for i in range(min(len(expected), len(got))) if expected[i] != got[i]),
                   None)
    if diff_at is None:
        out.append(f"      lengths differ: expected {len(expected)} B, got {len(got)} B "
                   f"(common prefix identical)")
    else:
        field = describe_field(expected, diff_at)
        where = f" ({field})" if field else ""
        out.append(f"      first difference at byte {diff_at}{where}: expected "
                   f"{expected[diff_at]:02x}, got {got[diff_at]:02x}")
    out.append("      expected bytes:")
    out.append(hexdump(expected))
    out.append("      got bytes:")
    out.append(hexdump(got))
    return out


def explain_single(label, index, frame):
    return [f"    {label} packet {index} ({len(frame)} B): {summary(frame)}", hexdump(frame)]


# ---------------------------------------------------------------------------------------------
# Comparisons. Each returns a list of report lines; empty means equal.

def remove_async(got, asynchronous):
    """Takes each control-plane frame out of `got` wherever it is. Returns (rest, report)."""
    rest = list(got)
    report = []
    for i, frame in enumerate(asynchronous):
        try:
            rest.remove(frame)
        except ValueError:
            report.append(f"  control-plane frame async[{i}] was not sent:")
            report += explain_single("missing", i, frame)
    return rest, report


def compare_ordered(expected, got):
    report = []
    shown = 0
    for i in range(max(len(expected), len(got))):
        if i < len(expected) and i < len(got):
            if expected[i] == got[i]:
                continue
            if shown < MAX_SHOWN:
                report += explain_pair(i, expected[i], got[i])
            shown += 1
        elif i < len(expected):
            if shown < MAX_SHOWN:
                report += explain_single("missing", i, expected[i])
            shown += 1
        else:
            if shown < MAX_SHOWN:
                report += explain_single("unexpected", i, got[i])
            shown += 1
    if shown > MAX_SHOWN:
        report.append(f"    ... and {shown - MAX_SHOWN} more differing packet(s)")
    if report:
        report.insert(0, f"  ordered comparison: expected {len(expected)} packet(s), got "
                         f"{len(got)}; differences:")
    return report


def similarity(a, b):
    return sum(x == y for x, y in zip(a, b)) - abs(len(a) - len(b))


def compare_multiset(expected, got):
    missing = list((collections.Counter(expected) - collections.Counter(got)).elements())
    extra = list((collections.Counter(got) - collections.Counter(expected)).elements())
    if not missing and not extra:
        return []
    report = [f"  unordered comparison: expected {len(expected)} packet(s), got {len(got)}; "
              f"{len(missing)} missing, {len(extra)} unexpected:"]
    # Each missing frame is shown next to the most similar unexpected one, so a one-field
    # difference reads as in an ordered diff.
    shown = 0
    for i, frame in enumerate(missing):
        if shown == MAX_SHOWN:
            break
        if extra:
            best = max(range(len(extra)), key=lambda k: similarity(frame, extra[k]))
            report += explain_pair(f"{i} (missing) vs the most similar unexpected one", frame,
                                   extra.pop(best))
        else:
            report += explain_single("missing", i, frame)
        shown += 1
    for i, frame in enumerate(extra):
        if shown == MAX_SHOWN:
            break
        report += explain_single("unexpected", i, frame)
        shown += 1
    return report


# ---------------------------------------------------------------------------------------------

def load_case(case_dir):
    path = os.path.join(case_dir, "case.yaml")
    try:
        with open(path) as f:
            case = yaml.safe_load(f)
    except (OSError, yaml.YAMLError) as e:
        raise CaseError(f"{path}: {e}")
    if not isinstance(case, dict):
        raise CaseError(f"{path}: expected a mapping")
    unknown = set(case) - CASE_KEYS
    if unknown:
        raise CaseError(f"{path}: unknown key(s) {sorted(unknown)}; expected {sorted(CASE_KEYS)}")
    ports = case.get("ports")
    if not isinstance(ports, list) or not ports or not all(isinstance(p, str) for p in ports):
        raise CaseError(f"{path}: 'ports' must be a non-empty list of port names")
    for p in case.get("unordered_ports", []) or []:
        if p not in ports:
            raise CaseError(f"{path}: unordered port '{p}' is not in 'ports'")
    metrics = case.get("metrics") or {}
    if not isinstance(metrics, dict):
        raise CaseError(f"{path}: 'metrics' must map series to values")
    return case


def remove_eal_runtime_dir(prefix):
    """EAL leaves its runtime directory (config, sockets) behind after rte_eal_cleanup; the
    prefix is this run's own, so remove it rather than let every run add one."""
    base = "/var/run/dpdk" if os.geteuid() == 0 else os.path.join(
        os.environ.get("XDG_RUNTIME_DIR", "/tmp"), "dpdk")
    shutil.rmtree(os.path.join(base, prefix), ignore_errors=True)


def read_frames(path):
    if not os.path.exists(path):
        return []
    try:
        return read_pcap(path)
    except PcapError as e:
        raise CaseError(str(e))


def run(case_dir, binary, workdir, timeout):
    case = load_case(case_dir)
    name = os.path.basename(os.path.normpath(case_dir))
    ports = case["ports"]
    unordered = set(case.get("unordered_ports", []) or [])

    # Instantiate the config.
    subst = {"@WORKDIR@": workdir}
    inputs = {}
    for p in ports:
        src = os.path.join(case_dir, f"in_{p}.pcap")
        if os.path.exists(src):
            inputs[p] = read_frames(src)
            in_path = os.path.abspath(src)
        else:
            inputs[p] = []
            in_path = os.path.join(workdir, f"in_{p}.pcap")
            write_pcap(in_path, [])  # net_pcap needs an rx_pcap on every port
        subst[f"@IN_{p}@"] = in_path
        subst[f"@OUT_{p}@"] = os.path.join(workdir, f"out_{p}.pcap")
    with open(os.path.join(case_dir, "config.yaml")) as f:
        cfg = f.read()
    for k, v in subst.items():
        cfg = cfg.replace(k, v)
    left = sorted(set(re.findall(r"@[A-Za-z0-9_.-]+@", cfg)))
    if left:
        raise CaseError(f"config.yaml: unknown placeholder(s) {left}; ports are {ports}")
    cfg_path = os.path.join(workdir, "config.yaml")
    with open(cfg_path, "w") as f:
        f.write(cfg)

    # Counters every case implies: each input frame received, each expected frame sent. A
    # case.yaml that lists them must agree with its pcaps (a stale case.yaml after gen.py).
    expected_frames = {p: read_frames(os.path.join(case_dir, f"expect_{p}.pcap")) for p in ports}
    async_frames = {p: read_frames(os.path.join(case_dir, f"async_{p}.pcap")) for p in ports}
    expected_metrics = {canonical_series(k): v for k, v in (case.get("metrics") or {}).items()}
    implied = {}
    for p in ports:
        implied[canonical_series(f'inaswitch_port_rx_packets_total{{port="{p}"}}')] = \
            len(inputs[p])
        implied[canonical_series(f'inaswitch_port_tx_packets_total{{port="{p}"}}')] = \
            len(expected_frames[p]) + len(async_frames[p])
    for series, value in implied.items():
        if series in expected_metrics and expected_metrics[series] != value:
            raise CaseError(f"case.yaml says {series} = {expected_metrics[series]}, but the "
                            f"case's pcaps imply {value}")

    stats_path = os.path.join(workdir, "stats.txt")
    for stale in [stats_path] + [os.path.join(workdir, f"out_{p}.pcap") for p in ports]:
        if os.path.exists(stale):  # a reused --workdir must not pass on an earlier run's files
            os.remove(stale)
    prefix = f"golden-{name}-{os.getpid()}"
    # The run ends once every input frame has been received and RX has then been idle: a worker
    # preempted mid-replay on a busy machine cannot end it early.
    total_in = sum(len(frames) for frames in inputs.values())
    cmd = [binary, "-c", cfg_path, "--idle-exit-ms", "300",
           "--idle-exit-after-rx", str(total_in), "--stats-file", stats_path,
           "--file-prefix", prefix]
    print(f"[{name}] {case.get('description', '').strip()}")
    print(f"[{name}] running: {' '.join(cmd)}")
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              timeout=timeout, cwd=workdir)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace")
        raise CaseError(f"the switch did not exit within {timeout} s (killed); its output:\n{out}")
    finally:
        remove_eal_runtime_dir(prefix)
    output = proc.stdout.decode(errors="replace")
    with open(os.path.join(workdir, "switch.log"), "w") as f:
        f.write(output)
    if proc.returncode != 0:
        raise CaseError(f"the switch exited with status {proc.returncode}; its output:\n{output}")

    failures = []

    # Packets, port by port.
    for p in ports:
        expected = expected_frames[p]
        asynchronous = async_frames[p]
        out_path = os.path.join(workdir, f"out_{p}.pcap")
        if not os.path.exists(out_path):
            raise CaseError(f"the switch wrote no {out_path}")
        got = read_frames(out_path)
        if p in unordered:
            report = compare_multiset(expected + asynchronous, got)
        else:
            rest, report = remove_async(got, asynchronous)
            report += compare_ordered(expected, rest)
        mode = "unordered" if p in unordered else "ordered"
        if report:
            failures.append(f"port {p} ({mode}): output differs from expect_{p}.pcap"
                            + (f" + async_{p}.pcap" if asynchronous else ""))
            failures += report
        else:
            print(f"[{name}] port {p}: {len(got)} packet(s) sent, as expected ({mode}"
                  + (f", {len(asynchronous)} from the control plane" if asynchronous else "")
                  + ")")

    # Metrics.
    try:
        with open(stats_path) as f:
            stats = parse_metrics(f.read())
    except OSError as e:
        raise CaseError(f"no stats file: {e}")
    metric_report = []
    checks = dict(implied)
    checks.update(expected_metrics)
    for series, value in sorted(checks.items()):
        if series not in stats:
            metric_report.append(f"  {series}: expected {value}, not reported by the switch")
        elif stats[series] != value:
            metric_report.append(f"  {series}: expected {value}, got {stats[series]:g}")
    zero_families = case.get("zero_unless_listed", DEFAULT_ZERO_UNLESS_LISTED)
    for series, value in sorted(stats.items()):
        if family_of(series) in zero_families and series not in checks and value != 0:
            metric_report.append(f"  {series}: expected 0 (not listed in case.yaml), got "
                                 f"{value:g}")
    if metric_report:
        failures.append("metrics differ:")
        failures += metric_report
    else:
        print(f"[{name}] metrics: {len(checks)} listed series as expected, every other "
              f"series of {len(zero_families)} checked families is 0")
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("case_dir")
    ap.add_argument("--binary", required=True, help="the inaswitch executable")
    ap.add_argument("--workdir", help="keep the run's files here (default: a temporary "
                                      "directory, removed when the case passes)")
    ap.add_argument("--timeout", type=float, default=60, help="hard limit on the switch's run "
                                                              "time in seconds (default 60)")
    args = ap.parse_args()

    case_dir = os.path.abspath(args.case_dir)
    binary = os.path.abspath(args.binary)
    if args.workdir:
        workdir = os.path.abspath(args.workdir)
        os.makedirs(workdir, exist_ok=True)
        keep = True
    else:
        workdir = tempfile.mkdtemp(prefix=f"golden-{os.path.basename(case_dir)}-")
        keep = False
    name = os.path.basename(case_dir)
    try:
        failures = run(case_dir, binary, workdir, args.timeout)
    except CaseError as e:
        print(f"[{name}] ERROR: {e}\n[{name}] files kept in {workdir}", file=sys.stderr)
        return 2
    if failures:
        print(f"[{name}] FAIL", file=sys.stderr)
        for line in failures:
            print(line, file=sys.stderr)
        print(f"[{name}] files kept in {workdir} (out_<port>.pcap, stats.txt, switch.log)",
              file=sys.stderr)
        return 1
    print(f"[{name}] PASS")
    if not keep:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
