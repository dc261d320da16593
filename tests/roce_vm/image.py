# SPDX-License-Identifier: Apache-2.0
"""The guest image of the RoCE interop harness: Debian 12's own kernel and RDMA userspace in a
busybox initramfs, built only from Debian packages (`apt-get download`), never from the host's
filesystem.

    image = guest_image()              # builds once, then served from the cache
    image.kernel, image.initrd         # PVH vmlinux, base initramfs (gzip cpio)
    extras_initrd(image, ["build/src/worker/rdma/ina-rdma-worker"], "/tmp/x/extra.cpio.gz")

The cache directory is /var/cache/inaswitch/roce-vm/<key>, where <key> hashes the exact package
versions apt would download and this builder's own inputs (this file and the guest scripts), so a
new kernel or a changed /init rebuilds, and nothing else does. Host executables go into a second
gzip cpio with their shared-library closure; the kernel unpacks concatenated archives in order,
so the base image stays cached and shared.

Run directly to build and print the paths: /usr/bin/python3 tests/roce_vm/image.py
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import lzma
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# The builder's own files in the guest: /init, and the GID lookup /init and lab.py both use.
GUEST_SCRIPTS = {os.path.join(HERE, "guest_init.sh"): "init",
                 os.path.join(HERE, "guest_gid_index.sh"): "usr/sbin/ina-gid-index"}
CACHE_ROOT = os.environ.get("INA_ROCE_VM_CACHE", "/var/cache/inaswitch/roce-vm")
LIBDIR = "usr/lib/x86_64-linux-gnu"

# The kernel meta-package; the concrete linux-image-6.1.0-N-amd64 behind it is resolved at build.
KERNEL_META = "linux-image-amd64"
GUEST_PACKAGES = [
    "busybox-static", "dash", "rdma-core", "ibverbs-providers", "ibverbs-utils", "rdmacm-utils",
    "perftest", "iproute2",
    # the tools' shared libraries (ldd below proves the list complete)
    "libc6", "libgcc-s1", "libibverbs1", "librdmacm1", "libibumad3", "libnl-3-200",
    "libnl-route-3-200", "libpci3", "libudev1", "zlib1g", "libbpf1", "libelf1", "libcap2",
    "libbsd0", "libmd0", "libmnl0", "libxtables12",
]
STALE_AFTER_S = 3 * 86400   # an image no lab used for this long is deleted
# Loaded in this order by /init, each after its dependencies (modules.dep decides).
GUEST_MODULES = ["virtio_pci", "virtio_net", "virtio_console", "configfs", "crc32_generic",
                 "rdma_rxe", "ib_uverbs", "rdma_ucm"]
# In the image, loaded when first used: netem for loss and delay in a guest (the host kernel
# may have no sch_netem; Debian's guest kernel has it), and ifb + ingress + matchall + mirred to
# put netem on what the guest receives too; u32 + gact drop chosen RoCE frames (by BTH opcode)
# from what a guest sends or receives, where netem would take every frame alike.
ON_DEMAND_MODULES = ["sch_netem", "ifb", "sch_ingress", "cls_matchall", "act_mirred",
                     "cls_u32", "act_gact"]
GUEST_TOOLS = [
    "bin/dash", "bin/ip", "bin/rdma", "sbin/tc",
    "usr/bin/ibv_devices", "usr/bin/ibv_devinfo", "usr/bin/ibv_rc_pingpong",
    "usr/bin/ibv_uc_pingpong", "usr/bin/ibv_ud_pingpong", "usr/bin/ibv_srq_pingpong",
    "usr/bin/rping", "usr/bin/ucmatose", "usr/bin/udaddy",
    "usr/bin/ib_send_bw", "usr/bin/ib_send_lat", "usr/bin/ib_write_bw", "usr/bin/ib_write_lat",
    "usr/bin/ib_read_bw", "usr/bin/ib_read_lat", "usr/bin/ib_atomic_bw",
]
# glibc dlopen()s libgcc_s for pthread_exit and cancellation; ldd cannot see it (rping aborts
# without it).
DLOPENED = [f"{LIBDIR}/libgcc_s.so.1"]
RXE_PROVIDER = [f"{LIBDIR}/libibverbs/librxe-rdmav34.so", "etc/libibverbs.d/rxe.driver"]


class ImageUnavailable(RuntimeError):
    """The image cannot be built here (no apt candidate, a download failed, a tool missing)."""


@dataclasses.dataclass
class Image:
    dir: str
    kernel: str          # uncompressed ELF vmlinux: qemu boots it by PVH, skipping the XZ stub
    initrd: str          # base initramfs, gzip cpio
    manifest: dict       # packages, kernel version, modules, files in the initramfs

    @property
    def files(self) -> set[str]:
        return set(self.manifest["files"])


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] image: {msg}", flush=True)


def _run(cmd: list[str], *, cwd: str | None = None, env: dict | None = None,
         timeout: float = 600) -> str:
    try:
        p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                           timeout=timeout)
    except FileNotFoundError as e:
        raise ImageUnavailable(f"{cmd[0]} is not installed ({e}); .ci/setup installs it") \
            from None
    if p.returncode != 0:
        raise ImageUnavailable(f"{' '.join(cmd)} failed ({p.returncode}): "
                               f"{(p.stderr or p.stdout).strip()[-2000:]}")
    return p.stdout


def _candidates(packages: list[str]) -> dict[str, str]:
    """name -> the version `apt-get download` would fetch."""
    out = _run(["apt-cache", "show", "--no-all-versions"] + packages)
    found: dict[str, str] = {}
    name = None
    for line in out.splitlines():
        if line.startswith("Package: "):
            name = line.split(None, 1)[1]
        elif line.startswith("Version: ") and name and name not in found:
            found[name] = line.split(None, 1)[1]
    return found


def resolve_packages() -> dict[str, str]:
    """The concrete guest packages and versions, from the host's apt lists (updated once if
    they do not know a package yet)."""
    for attempt in range(2):
        try:
            deps = _run(["apt-cache", "depends", KERNEL_META])
            m = re.search(r"Depends: (linux-image-\d\S*-amd64)\b", deps)
            if not m:
                raise ImageUnavailable(f"{KERNEL_META} depends on no linux-image-6.x: {deps}")
            wanted = [m.group(1)] + GUEST_PACKAGES
            versions = _candidates(wanted)
            missing = [p for p in wanted if p not in versions]
            if missing:
                raise ImageUnavailable(f"apt knows no candidate for {' '.join(missing)}")
            return {p: versions[p] for p in wanted}
        except ImageUnavailable:
            if attempt:
                raise
            log("apt lists lack a guest package; running apt-get update")
            _run(["apt-get", "update", "-qq"])
    raise AssertionError("unreachable")


def _apt_state() -> str:
    """A fingerprint of what resolve_packages() depends on: the packages asked for and apt's
    lists, sources and preferences."""
    h = hashlib.sha256()
    for d in ("/var/lib/apt/lists", "/etc/apt/sources.list.d", "/etc/apt/preferences.d"):
        names = sorted(os.listdir(d)) if os.path.isdir(d) else []
        for path in [os.path.join(d, n) for n in names] + [d]:
            if os.path.isfile(path):
                st = os.stat(path)
                h.update(f"{path} {st.st_size} {st.st_mtime_ns}\n".encode())
    for path in ("/etc/apt/sources.list", "/etc/apt/preferences"):
        if os.path.isfile(path):
            st = os.stat(path)
            h.update(f"{path} {st.st_size} {st.st_mtime_ns}\n".encode())
    h.update(json.dumps([KERNEL_META] + GUEST_PACKAGES).encode())
    return h.hexdigest()[:16]


def resolve_packages_cached(cache_root: str) -> dict[str, str]:
    """resolve_packages(), remembered until apt's lists or sources change (apt-cache takes
    seconds on a loaded machine, and every lab asks)."""
    path = os.path.join(cache_root, f"resolved-{_apt_state()}.json")
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        pass
    packages = resolve_packages()
    os.makedirs(cache_root, exist_ok=True)
    for name in os.listdir(cache_root):
        if name.startswith("resolved-"):
            try:
                os.unlink(os.path.join(cache_root, name))
            except OSError:
                pass
    tmp = f"{path}.{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(packages, f)
    os.replace(tmp, os.path.join(cache_root, f"resolved-{_apt_state()}.json"))
    return packages


def _builder_digest(packages: dict[str, str]) -> str:
    h = hashlib.sha256()
    h.update(json.dumps(packages, sort_keys=True).encode())
    for path in [os.path.abspath(__file__)] + sorted(GUEST_SCRIPTS):
        with open(path, "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:16]


def _deb_name(pkg: str, version: str) -> str:
    # apt-get download's file name: the epoch's ':' becomes '%3a'
    return f"{pkg}_{version.replace(':', '%3a')}_amd64.deb"


def _download(packages: dict[str, str], debs: str) -> list[str]:
    os.makedirs(debs, exist_ok=True)
    paths = []
    for pkg, version in packages.items():
        path = os.path.join(debs, _deb_name(pkg, version))
        if not os.path.exists(path):
            log(f"apt-get download {pkg}={version}")
            _run(["apt-get", "download", "-q", f"{pkg}={version}"], cwd=debs)
            if not os.path.exists(path):
                raise ImageUnavailable(f"apt-get download {pkg}={version} wrote no {path}")
        paths.append(path)
    return paths


def _extract_vmlinux(vmlinuz: str, out: str) -> None:
    """Debian's bzImage carries the kernel as an XZ stream; the ELF inside boots by PVH."""
    with open(vmlinuz, "rb") as f:
        data = f.read()
    start = data.find(b"\xfd7zXZ\x00")
    if start < 0:
        raise ImageUnavailable(f"{vmlinuz}: no XZ payload")
    elf = lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(data[start:])
    if elf[:4] != b"\x7fELF":
        raise ImageUnavailable(f"{vmlinuz}: the XZ payload is not an ELF kernel")
    with open(out, "wb") as f:
        f.write(elf)


def _module_closure(stage: str, kver: str, names: list[str]) -> list[str]:
    """Module paths (relative to lib/modules/<kver>) in load order, dependencies first."""
    deps: dict[str, list[str]] = {}
    by_name: dict[str, str] = {}
    with open(os.path.join(stage, "lib/modules", kver, "modules.dep")) as f:
        for line in f:
            path, _, rest = line.partition(":")
            deps[path] = rest.split()
            by_name[re.sub(r"\.ko(\.\w+)?$", "", os.path.basename(path)).replace("-", "_")] = path
    order: list[str] = []

    def visit(path: str) -> None:
        if path in order:
            return
        for d in deps[path]:
            visit(d)
        order.append(path)
    for name in names:
        if name not in by_name:
            raise ImageUnavailable(f"module {name} is not in {kver}")
        visit(by_name[name])
    return order


def _in_stage(stage: str, rel: str) -> str | None:
    """The file `rel` names inside the extracted packages, following symbolic links as the
    guest would (an absolute target is inside the stage, never the host's file); None if
    missing."""
    for _ in range(20):
        path = os.path.join(stage, rel)
        if not os.path.islink(path):
            return path if os.path.isfile(path) else None
        target = os.readlink(path)
        rel = os.path.normpath(target.lstrip("/") if target.startswith("/")
                               else os.path.join(os.path.dirname(rel), target))
    return None


def _elf(path: str) -> bool:
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


def library_closure(executables: list[str], ld_library_path: str | None = None) -> list[str]:
    """The shared libraries the dynamic loader maps for `executables` (ldd), plus what glibc
    dlopens behind ldd's back; absolute host paths, the loader itself included."""
    env = dict(os.environ)
    if ld_library_path:
        env["LD_LIBRARY_PATH"] = ld_library_path
    libs: set[str] = set()
    for exe in executables:
        if not _elf(exe):
            continue
        p = subprocess.run(["ldd", exe], capture_output=True, text=True, env=env)
        text = p.stdout + p.stderr
        if "not a dynamic executable" in text or "statically linked" in text:
            continue
        if p.returncode != 0:
            raise ImageUnavailable(f"ldd {exe} failed: {text.strip()}")
        for line in text.splitlines():
            if "not found" in line:
                raise ImageUnavailable(f"{exe}: library not found: {line.strip()}")
            m = re.search(r"=> (/\S+)", line) or re.match(r"\s*(/\S+)", line)
            if m:
                libs.add(m.group(1))
    return sorted(libs)


def _copy(src: str, root: str, rel: str) -> None:
    dst = os.path.join(root, rel)
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    shutil.copy2(src, dst, follow_symlinks=True)


def write_cpio_gz(root: str, out: str) -> None:
    """A gzip newc cpio of the tree at root (what the kernel's initramfs unpacker reads)."""
    names = []
    for d, dirs, files in os.walk(root):
        dirs.sort()
        for n in sorted(dirs + files):
            names.append(os.path.relpath(os.path.join(d, n), root))
    listing = "".join(n + "\n" for n in names)
    with open(out, "wb") as f:
        cpio = subprocess.Popen(["cpio", "-o", "-H", "newc", "--quiet", "-R", "0:0"],
                                cwd=root, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        gz = subprocess.Popen(["gzip", "-1", "-n"], stdin=cpio.stdout, stdout=f)
        cpio.stdout.close()
        cpio.stdin.write(listing.encode())
        cpio.stdin.close()
        if cpio.wait() != 0 or gz.wait() != 0:
            raise ImageUnavailable(f"cpio/gzip of {root} failed")


def _build(packages: dict[str, str], debs: list[str], out: str, scratch: str) -> dict:
    kpkg = next(p for p in packages if p.startswith("linux-image-"))
    kver = kpkg[len("linux-image-"):]
    stage = os.path.join(scratch, "stage")
    root = os.path.join(scratch, "root")
    os.makedirs(stage)
    # usrmerge layout: /lib is a link to /usr/lib, where every library and module goes.
    os.makedirs(os.path.join(root, "usr/lib"))
    os.symlink("usr/lib", os.path.join(root, "lib"))
    for deb in debs:
        _run(["dpkg-deb", "-x", deb, stage])

    _extract_vmlinux(os.path.join(stage, "boot", f"vmlinuz-{kver}"),
                     os.path.join(out, "vmlinux"))

    # Modules: the .deb ships no modules.dep; depmod makes one, and again for the subset.
    _run(["depmod", "-b", stage, kver])
    modules = _module_closure(stage, kver, GUEST_MODULES)
    on_demand = [m for m in _module_closure(stage, kver, ON_DEMAND_MODULES) if m not in modules]
    mod_src = os.path.join(stage, "lib/modules", kver)
    mod_dst = f"usr/lib/modules/{kver}"
    for rel in modules + on_demand:
        _copy(os.path.join(mod_src, rel), root, f"{mod_dst}/{rel}")
    for name in os.listdir(mod_src):
        if name.startswith("modules.builtin") or name == "modules.order":
            _copy(os.path.join(mod_src, name), root, f"{mod_dst}/{name}")
    _run(["depmod", "-b", root, kver])
    load_order = [re.sub(r"\.ko(\.\w+)?$", "", os.path.basename(m)) for m in modules]
    os.makedirs(os.path.join(root, "etc"), exist_ok=True)
    with open(os.path.join(root, "etc/ina-modules"), "w") as f:
        f.write("".join(m + "\n" for m in load_order))

    # Userspace: busybox, the tools, the rxe provider, and their libraries from the stage only.
    _copy(os.path.join(stage, "bin/busybox"), root, "bin/busybox")
    tools = []
    for rel in GUEST_TOOLS + RXE_PROVIDER + DLOPENED:
        src = _in_stage(stage, rel)
        if src is None:  # usrmerge moves: bin/ <-> usr/bin/
            src = _in_stage(stage, rel[4:] if rel.startswith("usr/") else "usr/" + rel)
        if src is None:
            raise ImageUnavailable(f"{rel} is in no guest package")
        _copy(src, root, rel)
        tools.append(src)
    # Commands run under dash: busybox's shell runs its own applets before any program in
    # PATH, so `ip` would be busybox's and not iproute2's.
    os.symlink("dash", os.path.join(root, "bin/sh"))
    shutil.copytree(os.path.join(stage, "etc/rdma"), os.path.join(root, "etc/rdma"))
    search = ":".join(os.path.join(stage, d) for d in (
        "lib/x86_64-linux-gnu", LIBDIR, f"{LIBDIR}/libibverbs"))
    for lib in library_closure(tools, search):
        if not lib.startswith(stage + "/"):
            # the host's loader (/lib64/ld-linux...) is replaced by the stage's below
            if os.path.basename(lib).startswith("ld-linux"):
                continue
            raise ImageUnavailable(f"{lib} resolved outside the guest packages: add its package")
        rel = os.path.relpath(lib, stage)
        if rel.startswith("lib/"):  # one canonical place: /usr/lib (usrmerge); /lib links to it
            rel = "usr/" + rel
        _copy(lib, root, rel)
    loader = _in_stage(stage, "lib/x86_64-linux-gnu/ld-linux-x86-64.so.2")
    _copy(loader, root, f"{LIBDIR}/ld-linux-x86-64.so.2")
    os.makedirs(os.path.join(root, "lib64"))
    os.symlink(f"/{LIBDIR}/ld-linux-x86-64.so.2", os.path.join(root, "lib64/ld-linux-x86-64.so.2"))
    for d in ("proc", "sys", "dev", "tmp", "run", "root", "usr/local/bin", "sbin", "usr/sbin"):
        os.makedirs(os.path.join(root, d), exist_ok=True)
    with open(os.path.join(root, "etc/passwd"), "w") as f:
        f.write("root:x:0:0:root:/root:/bin/sh\n")
    with open(os.path.join(root, "etc/group"), "w") as f:
        f.write("root:x:0:\n")
    with open(os.path.join(root, "etc/hosts"), "w") as f:
        f.write("127.0.0.1 localhost\n")
    for src, rel in GUEST_SCRIPTS.items():
        shutil.copy(src, os.path.join(root, rel))
        os.chmod(os.path.join(root, rel), 0o755)

    write_cpio_gz(root, os.path.join(out, "initramfs.cpio.gz"))
    files = sorted("/" + os.path.relpath(os.path.join(d, n), root)
                   for d, _, names in os.walk(root) for n in names)
    return {"packages": packages, "kernel_version": kver, "modules": load_order,
            "files": files}


def _prune(cache_root: str, keep: str) -> None:
    """Deletes images (and unreferenced .debs) no lab has used for STALE_AFTER_S: every
    package update or builder change leaves the previous 70 MB image behind. Called with the
    cache lock held."""
    now = time.time()
    referenced: set[str] = set()
    for name in os.listdir(cache_root):
        d = os.path.join(cache_root, name)
        manifest = os.path.join(d, "manifest.json")
        if not os.path.isfile(manifest):
            continue  # the .debs, the apt resolution
        if d != keep and now - os.stat(manifest).st_mtime > STALE_AFTER_S:
            log(f"removing {d}, unused for {STALE_AFTER_S // 86400} days")
            shutil.rmtree(d, ignore_errors=True)
            continue
        with open(manifest) as f:
            referenced |= {_deb_name(p, v) for p, v in json.load(f)["packages"].items()}
    debs = os.path.join(cache_root, "debs")
    for name in os.listdir(debs) if os.path.isdir(debs) else []:
        if name.endswith(".deb") and name not in referenced:
            os.unlink(os.path.join(debs, name))


def guest_image(cache_root: str = CACHE_ROOT) -> Image:
    """The cached image for the current package versions, built first if it is missing."""
    packages = resolve_packages_cached(cache_root)
    key = _builder_digest(packages)
    final = os.path.join(cache_root, key)
    manifest_path = os.path.join(final, "manifest.json")
    os.makedirs(cache_root, exist_ok=True)
    # One builder at a time per cache: the others wait for it and then find its result.
    with open(os.path.join(cache_root, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(manifest_path):
            t0 = time.monotonic()
            log(f"building {final} (kernel {next(iter(packages))})")
            debs = _download(packages, os.path.join(cache_root, "debs"))
            scratch = tempfile.mkdtemp(prefix="build-", dir=cache_root)
            try:
                out = os.path.join(scratch, "out")
                os.makedirs(out)
                manifest = _build(packages, debs, out, scratch)
                manifest["built_s"] = round(time.monotonic() - t0, 1)
                with open(os.path.join(out, "manifest.json"), "w") as f:
                    json.dump(manifest, f, indent=1)
                shutil.rmtree(final, ignore_errors=True)
                os.rename(out, final)
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
            log(f"built in {time.monotonic() - t0:.1f}s")
        os.utime(manifest_path)  # last use, for _prune
        _prune(cache_root, keep=final)
    with open(manifest_path) as f:
        manifest = json.load(f)
    return Image(final, os.path.join(final, "vmlinux"), os.path.join(final, "initramfs.cpio.gz"),
                 manifest)


def extras_initrd(image: Image, entries: list, out: str, scratch: str) -> str:
    """A gzip cpio with host files for the guest, to be concatenated after the base initramfs.
    Each entry is a host path (an executable goes to /usr/local/bin/<name>) or a pair
    (host path, guest path). ELF files bring their ldd closure and libgcc_s.so.1; libraries
    the base image already has are left out. Returns out."""
    root = os.path.join(scratch, "extra-root")
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    placed = []
    for e in entries:
        src, dst = (e, None) if isinstance(e, str) else e
        src = os.path.abspath(src)
        if not os.path.isfile(src):
            raise FileNotFoundError(f"extra file {src} does not exist")
        dst = dst or f"/usr/local/bin/{os.path.basename(src)}"
        _copy(src, root, dst.lstrip("/"))
        placed.append(src)
    base = image.files
    libs = library_closure(placed)
    gcc_s = "/lib/x86_64-linux-gnu/libgcc_s.so.1"
    if libs and gcc_s not in libs and os.path.exists(gcc_s):
        libs.append(gcc_s)
    for lib in libs:
        if os.path.basename(lib).startswith("ld-linux"):
            continue
        rel = f"{LIBDIR}/{os.path.basename(lib)}"
        if "/" + rel in base:
            continue
        _copy(lib, root, rel)
    # /init checks that every file arrived: a guest too small for the archive loses files
    # silently while the kernel unpacks it.
    os.makedirs(os.path.join(root, "etc"), exist_ok=True)
    with open(os.path.join(root, "etc/ina-extras"), "w") as f:
        for d, _, names in os.walk(root):
            for n in sorted(names):
                rel = os.path.relpath(os.path.join(d, n), root)
                if rel != "etc/ina-extras":
                    f.write(f"/{rel} {os.path.getsize(os.path.join(d, n))}\n")
    write_cpio_gz(root, out)
    return out


def main() -> int:
    image = guest_image()
    print(json.dumps({"dir": image.dir, "kernel": image.kernel, "initrd": image.initrd,
                      "kernel_version": image.manifest["kernel_version"],
                      "modules": image.manifest["modules"]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
