# SPDX-License-Identifier: Apache-2.0
"""`pip install ./python` works offline (the in-tree backend needs nothing from an index) and
the installed copy, not the build tree, reduces: pip installs into a scratch --target reusing
this build directory, then a fresh interpreter with only that directory on its path imports
inaswitch from there and two workers (threads) sum through ina-ps on loopback; its
inaswitch.rdma (the RDMA module, also in the wheel) imports and, without an RDMA device here,
raises inaswitch.rdma.RdmaError, an inaswitch.Error.

    python3 test_pip_install.py SOURCE/python BUILD
"""

import os
import subprocess
import sys
import tempfile

CHECK = r"""
import os, socket, subprocess, sys, threading
import numpy as np
import inaswitch
target, ps_exe = sys.argv[1], sys.argv[2]
assert os.path.realpath(inaswitch.__file__).startswith(os.path.realpath(target)), inaswitch.__file__
with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
ps = subprocess.Popen([ps_exe, "--job", "3", "--abm", "1-2", "--type", "fp32", "--op", "sum",
                       "--bind", "127.0.0.1", "--port", str(port), "--idle-exit-ms", "30000",
                       "--workers", "1=127.0.0.2,2=127.0.0.3"],
                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
try:
    assert "listening" in ps.stderr.readline()
    arrays = [np.arange(1000, dtype=np.float32) * (i + 1) for i in range(2)]
    clients = [inaswitch.Client(3, i + 1, "1-2", "127.0.0.1", bind=f"127.0.0.{i + 2}",
                                port=port, timeout_ms=20000) for i in range(2)]
    threads = [threading.Thread(target=c.allreduce_, args=(a,)) for c, a in zip(clients, arrays)]
    for t in threads: t.start()
    for t in threads: t.join(60)
    for a in arrays:
        np.testing.assert_array_equal(a, np.arange(1000, dtype=np.float32) * 3)
    print("installed inaswitch from", os.path.dirname(inaswitch.__file__), "reduced 2 x 1000 fp32")
    # The RDMA module is in the wheel too; without an RDMA device (this host) it says so.
    import inaswitch.rdma
    try:
        inaswitch.rdma.SwitchClient(job=7, rank=1, world=2, switch_api="http://127.0.0.1:1")
        raise AssertionError("an RDMA client connected without an RDMA device")
    except inaswitch.rdma.RdmaError as e:
        assert isinstance(e, inaswitch.Error), type(e)
        print("inaswitch.rdma without an RDMA device:", e)
finally:
    ps.terminate()
    ps.communicate(timeout=10)
"""


def main() -> int:
    source, build = sys.argv[1], os.path.abspath(sys.argv[2])
    with tempfile.TemporaryDirectory(prefix="inaswitch-pip-") as target:
        p = subprocess.run([sys.executable, "-m", "pip", "install", "--no-index",
                            "--disable-pip-version-check", "--no-cache-dir", "--target", target,
                            "--config-settings", f"builddir={build}", source],
                           capture_output=True, text=True, timeout=600)
        print(p.stdout[-3000:], p.stderr[-3000:])
        if p.returncode != 0:
            print(f"FAIL: pip install exited {p.returncode}")
            return 1
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env["PYTHONPATH"] = target
        p = subprocess.run([sys.executable, "-c", CHECK, target,
                            os.path.join(build, "src", "worker", "ina-ps")],
                           capture_output=True, text=True, timeout=120, env=env, cwd=target)
        print(p.stdout, p.stderr)
        if p.returncode != 0:
            print(f"FAIL: the installed package did not reduce (exit {p.returncode})")
            return 1
    print("ok: pip install ./python, then the installed package reduced through ina-ps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
