# SPDX-License-Identifier: Apache-2.0
"""End-to-end time of a RoCEv2 server-to-server AllReduce between real RDMA stacks (issue 12's
second bench row): Debian's kernel with rdma_rxe in qemu VMs (tests/roce_vm's lab: a root and 2
workers, inaswitch on the host routing between their taps), `ina-rdma-worker --mode
server-to-server` in each worker VM and `ina-rdma-root` in the root VM, the same command with the
switch aggregating (an `rdma_s2s` job learning the connections from the RDMA CM exchange) and
without (no job: the switch forwards, the root reduces world x chunks WRITEs itself). After one
unmeasured round, rounds alternate with and without, so a load change hits both; every round's
int32 result is checked bit-exact against the host's sum. The VMs run under TCG (no KVM):
absolute times are slow and what counts is the ratio."""
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "roce_vm"))

from common import mmm  # noqa: E402

JOB = 7  # test_rdma_allreduce.worker_cmd's default job
CHUNK = 1024


def measure(build, repeat, elements, log=print):
    # The lab and its helpers come from the roce-vm tests (one harness for tests and bench).
    from lab import Lab, check  # noqa: E402
    from test_rdma_allreduce import (WORLD, allreduce, int32_inputs, root_cmd,  # noqa: E402
                                     stripped)

    worker_exe = os.path.join(build, "src", "worker", "rdma", "ina-rdma-worker")
    root_exe = os.path.join(build, "src", "worker", "rdma", "ina-rdma-root")
    switch_exe = os.path.join(build, "src", "app", "inaswitch")

    def config(with_job):
        def make(cfg, lab):
            if with_job:
                cfg["rdma_s2s"] = {"jobs": [{"id": JOB, "root": lab.vms[0].ip, "world": WORLD,
                                             "op": "sum", "dtype": "int32",
                                             "chunk_bytes": CHUNK, "window": 64,
                                             "learn": True}]}
            return cfg
        return make

    modes = [("with aggregation", True), ("without (forwarded, the root reduces)", False)]
    scratch = tempfile.mkdtemp(prefix="bench-rocevm-")
    try:
        data = [int32_inputs(scratch, seed=7000 + n, elements=elements) for n in range(repeat)]
        extra = [stripped(worker_exe, scratch), stripped(root_exe, scratch)]
        extra += [(p, "/root/" + os.path.basename(p)) for paths, _sha in data for p in paths]
        runs = {label: [] for label, _ in modes}
        roots = {label: [] for label, _ in modes}
        loads = []
        with Lab(1 + WORLD, fabric="inaswitch", switch_exe=switch_exe, routed=True,
                 switch_config=config(True), extra_files=extra) as lab:
            root_vm, workers = lab.vms[0], lab.vms[1:]
            lab.reach_all()
            root = root_vm.start(root_cmd(root_vm, "--rounds %d --timeout-ms 120000" %
                                          (1 + repeat * len(modes))))
            root_vm.wait_rdma_cm_listen(timeout=60)
            # One unmeasured round first: the guests' first connections and page faults.
            warm_paths, _sha = data[0]
            allreduce(root_vm, workers,
                      ["--type int32 --chunk-bytes %d --input /root/%s --output /tmp/int32.out"
                       % (CHUNK, os.path.basename(p)) for p in warm_paths], "bench warm-up")
            for n in range(repeat):
                paths, sha = data[n]
                for label, with_job in modes:
                    lab.reload_switch(config(with_job))
                    loads.append(os.getloadavg()[0])
                    t0 = time.monotonic()
                    allreduce(root_vm, workers,
                              ["--type int32 --chunk-bytes %d --input /root/%s --output "
                               "/tmp/int32.out" % (CHUNK, os.path.basename(p)) for p in paths],
                              "bench %s" % label)
                    wall = time.monotonic() - t0
                    for vm in workers:
                        _rc, out = vm.run("sha256sum /tmp/int32.out", check=True)
                        check(out.split()[0] == sha, "%s: %s's result bit-exact" % (label,
                                                                                   vm.name))
                    runs[label].append(round(wall, 3))
                    log("roce-vm s2s AllReduce %d x int32 %d KiB, %s: %.2f s wall" % (
                        WORLD, elements * 4 // 1024, label, wall))
            rc, out = root.wait(120)
            check(rc == 0, "ina-rdma-root served every round (exit %d)" % rc)
            rounds = [json.loads(line) for line in out.splitlines()
                      if line.startswith("{") and '"round"' in line]
            for k, r in enumerate(rounds[1:]):
                roots[modes[k % len(modes)][0]].append(r.get("contributions"))
        with_s = statistics.median(runs[modes[0][0]])
        without_s = statistics.median(runs[modes[1][0]])
        rows = [{"mode": label, "wall_s": mmm(runs[label]),
                 "root_contribution_writes": roots[label]} for label, _ in modes]
        log("roce-vm s2s: with / without aggregation %.3f (medians %.2f s / %.2f s)" % (
            with_s / without_s, with_s, without_s))
        return {"world": WORLD, "bytes_per_worker": elements * 4, "chunk_bytes": CHUNK,
                "repeat": repeat, "boot_s": round(lab.timings.get("boot_s", 0), 1),
                "rows": rows, "ratio": round(with_s / without_s, 3),
                "loadavg": mmm([round(x, 2) for x in loads])}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
