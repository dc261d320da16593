# SPDX-License-Identifier: Apache-2.0
"""PEP 517 backend for python/pyproject.toml: builds the extension target of the inaswitch meson
project this directory belongs to and packs it with the package's modules into a wheel.

It needs no package from an index (pip's isolated build environment stays empty): only meson
and ninja, which build the project anyway. The config setting `builddir` names a configured
build directory to reuse (only the extension and what it links are built there); without it a
temporary one is set up and removed afterwards.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import tomllib
import zipfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # python/
PROJECT = os.path.dirname(HERE)                                      # the meson project
MODULES = ("__init__.py", "torch.py", "rdma.py")
# The extension modules: _native (the UDP client) and _rdma (the RDMA server-to-switch client).
EXTENSIONS = ("_native", "_rdma")


def _metadata() -> tuple[str, str, str]:
    with open(os.path.join(HERE, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    return project["name"], project["version"], project["description"]


def _tag() -> str:
    impl = f"cp{sys.version_info.major}{sys.version_info.minor}"
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return f"{impl}-{impl}-{platform}"


def _build_extensions(builddir: str) -> list[str]:
    """Builds python/inaswitch's extension modules in `builddir`; returns their paths."""
    if not os.path.exists(os.path.join(PROJECT, "meson.build")):
        raise RuntimeError(f"{HERE} is not inside an inaswitch checkout: the extension is built "
                           "by the project's meson build")
    # meson is a Python program of the system interpreter: pip's isolated build environment
    # (PYTHONPATH with a sitecustomize hiding the system's packages) must not reach it.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    if not os.path.exists(os.path.join(builddir, "build.ninja")):
        subprocess.run(["meson", "setup", builddir, PROJECT, "--buildtype=debugoptimized"],
                       check=True, stdout=sys.stderr, env=env)
    targets = ["python/inaswitch/" + e + sysconfig.get_config_var("EXT_SUFFIX")
               for e in EXTENSIONS]
    # The meson build targets Debian's /usr/bin/python3: another interpreter's ABI has no
    # such target, and ninja says so.
    subprocess.run(["ninja", "-C", builddir] + targets, check=True, stdout=sys.stderr, env=env)
    return [os.path.join(builddir, t) for t in targets]


def _record_line(arcname: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arcname},sha256={digest},{len(data)}"


def get_requires_for_build_wheel(config_settings=None) -> list[str]:
    return []


def _metadata_files(info: str) -> list[tuple[str, bytes]]:
    name, version, summary = _metadata()
    return [
        (f"{info}/METADATA", (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nSummary: {summary}\n"
            "License: Apache-2.0\nRequires-Python: >=3.9\n").encode()),
        (f"{info}/WHEEL", (
            f"Wheel-Version: 1.0\nGenerator: inaswitch_wheel\nRoot-Is-Purelib: false\n"
            f"Tag: {_tag()}\n").encode()),
    ]


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None) -> str:
    """The dist-info alone, so pip does not build the extension twice."""
    name, version, _ = _metadata()
    info = f"{name}-{version}.dist-info"
    for arcname, data in _metadata_files(info):
        path = os.path.join(metadata_directory, arcname)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
    return info


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None) -> str:
    name, version, _ = _metadata()
    builddir = (config_settings or {}).get("builddir")
    scratch = None if builddir else tempfile.mkdtemp(prefix="inaswitch-wheel-")
    try:
        extensions = _build_extensions(os.path.abspath(builddir or scratch))
        files: list[tuple[str, bytes]] = []
        for module in MODULES:
            with open(os.path.join(HERE, "inaswitch", module), "rb") as f:
                files.append((f"inaswitch/{module}", f.read()))
        for extension in extensions:
            with open(extension, "rb") as f:
                files.append((f"inaswitch/{os.path.basename(extension)}", f.read()))
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    tag = _tag()
    info = f"{name}-{version}.dist-info"
    files += _metadata_files(info)
    record = [_record_line(n, d) for n, d in files] + [f"{info}/RECORD,,"]
    files.append((f"{info}/RECORD", ("\n".join(record) + "\n").encode()))
    wheel = f"{name}-{version}-{tag}.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel), "w", zipfile.ZIP_DEFLATED) as z:
        for arcname, data in files:
            z.writestr(arcname, data)
    return wheel
