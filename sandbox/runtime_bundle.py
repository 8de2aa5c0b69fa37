"""A self-contained Python for task images that have none (or one older than the runtime needs).

The in-sandbox runtime (``runtime.py``) is Python. A task image
without a usable ``python3`` (a Go or Rust project's image, say) gets this bundle
mounted read-only at ``/.swe/py``: the sandbox image's CPython, its standard library and
every shared library it and its extension modules link against (``ldd``), with the
bundle's own dynamic loader. It is started through that loader
(``/.swe/py/lib64/ld-linux-x86-64.so.2 --library-path ... python3.X``), so it runs on any
Linux image of the same architecture whatever its C library; what it starts (the agent's
shell, git) uses the image's own. ``/.swe/py/python`` is a wrapper script for the same.
Built once per sandbox image, cached beside the workspace templates.
"""

from __future__ import annotations

import io
import shutil
import tarfile
import tempfile
import threading
from pathlib import Path
from typing import Any

MOUNT = "/.swe/py"
MIN_PYTHON = (3, 7)  # runtime.py: `from __future__ import annotations`
_lock = threading.Lock()

# Runs as root in a throwaway container of the sandbox image: one tar of the interpreter,
# its standard library and the libraries they load, links resolved.
_COLLECT = r"""
set -euo pipefail
py=$(readlink -f /usr/bin/python3)
ver=$(basename "$py")
stdlib=/usr/lib/$ver
libs=$( { ldd "$py"; ldd "$stdlib"/lib-dynload/*.so; } | awk '/=>/ {print $3} /ld-linux/ {print $1}' | sort -u)
loader=$(ldd "$py" | awk '/ld-linux/ {print $1}')
printf '%s\n%s\n' "$ver" "$loader" > /tmp/bundle.info
tar --exclude='__pycache__' --exclude="$stdlib/test" --exclude="$stdlib/idlelib" --exclude="$stdlib/tkinter" \
    --exclude="$stdlib/ensurepip" -chf /tmp/bundle.tar "$py" "$stdlib" $libs /tmp/bundle.info
"""


def _library_dirs(root: Path) -> list[str]:
    dirs = sorted({str(p.parent.relative_to(root)) for p in root.rglob("*.so*")
                   if "python3" not in str(p.relative_to(root))})
    return [f"{MOUNT}/{d}" for d in dirs]


def runtime_argv(bundle: Path, script: str) -> list[str]:
    """The command that runs ``script`` with the bundle's interpreter (as the runtime is run: -I -S)."""
    ver, loader = (bundle / "tmp" / "bundle.info").read_text().split()
    return [f"{MOUNT}{loader}", "--library-path", ":".join(_library_dirs(bundle)), f"{MOUNT}/usr/bin/{ver}",
            "-I", "-S", script]


def build_bundle(client: Any, sandbox_image: str, cache: Path) -> Path:
    """The bundle made from ``sandbox_image`` (built once, cached under ``cache``)."""
    image_id = client.api.inspect_image(sandbox_image)["Id"].split(":")[-1][:16]
    dest = cache / "runtime-bundle" / image_id
    with _lock:
        if (dest / ".complete").exists():
            return dest
        dest.parent.mkdir(parents=True, exist_ok=True)
        container = client.api.create_container(sandbox_image, command=["bash", "-c", _COLLECT], user="0:0",
                                                network_disabled=True)
        tmp = Path(tempfile.mkdtemp(prefix=".bundle-", dir=dest.parent))
        try:
            client.api.start(container["Id"])
            code = client.api.wait(container["Id"])["StatusCode"]
            if code != 0:
                logs = client.api.logs(container["Id"]).decode(errors="replace")[-1000:]
                raise RuntimeError(f"could not collect the runtime bundle from {sandbox_image}: {logs}")
            stream, _ = client.api.get_archive(container["Id"], "/tmp/bundle.tar")
            outer = tarfile.open(fileobj=io.BytesIO(b"".join(stream)))
            inner = outer.extractfile(outer.getmembers()[0])
            with tarfile.open(fileobj=inner) as tf:
                tf.extractall(tmp, filter="tar")
            wrapper = tmp / "python"
            wrapper.write_text("#!/bin/sh\nexec " + " ".join(f"'{a}'" for a in runtime_argv(tmp, "")[:-3])
                               + ' "$@"\n')
            wrapper.chmod(0o755)
            tmp.chmod(0o755)  # mkdtemp's 0700 would keep the session uid out
            (tmp / ".complete").write_text("1\n")
            shutil.rmtree(dest, ignore_errors=True)
            tmp.rename(dest)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        finally:
            client.api.remove_container(container["Id"], force=True)
    return dest


def image_has_python(client: Any, image: str) -> bool:
    """Whether ``image`` has a ``python3`` the runtime can run on (a throwaway container, no network)."""
    check = f"import sys; sys.exit(0 if sys.version_info >= {MIN_PYTHON!r} else 3)"
    container = client.api.create_container(image, command=["python3", "-c", check], network_disabled=True,
                                            user="65534:65534")
    try:
        client.api.start(container["Id"])
        return client.api.wait(container["Id"])["StatusCode"] == 0
    except Exception:  # no python3 at all: the engine cannot start the command
        return False
    finally:
        client.api.remove_container(container["Id"], force=True)
