"""Image-resident workspaces: the repository already sits inside a task's image.

SWE-bench-family instances ship one image each, the repository at a path inside it
(``/testbed`` for SWE-bench-layout images) and its dependencies in an environment
there. Two things are made from such an image, each once and cached:

- the workspace *template*: the image's repository folder exported to this host
  (``export_image_tree``) and then put through the same scrub as a host directory
  (``sandbox/workspace.py``: bytecode, caches and archives of code purged, history
  squashed to the single base commit and checked);
- the *session image* (``derived_image``): the task image with setuid bits cleared
  and every blocked tool deleted (``harden_image.sh``), the original repository
  folder replaced by a symlink to ``/workspace`` (so paths the image's environment
  recorded, such as an editable install of ``/testbed``, reach the session's
  copy), and a label saying which tools are gone. Builds run with no network.

Sessions then run exactly like host-directory ones (docker backend), with a
copy-on-write view of the template at ``/workspace`` (``cow.py``) or a copy, and the
runtime on the image's own ``python3`` or, where it has none (or one older than 3.7),
on a self-contained bundle (``runtime_bundle.py``).
"""

from __future__ import annotations

import hashlib
import io
import os
import posixpath
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from .git import run_git
from .models import SandboxStartError, WorkspaceError, WorkspaceSpec

DERIVED_REPO = "swe-openenv-task"
DERIVED_RECIPE = "2"  # bump when the derived image's build steps change
HARDEN_SCRIPT = Path(__file__).with_name("harden_image.sh")
TOOLS_LABEL = "org.swe-openenv.blocked-tools"
SOURCE_LABEL = "org.swe-openenv.derived-from"


def image_id(client: Any, image: str) -> str:
    """The local image's content id; a clear error when the engine does not have it."""
    import docker.errors

    try:
        return client.api.inspect_image(image)["Id"]
    except docker.errors.ImageNotFound:
        raise WorkspaceError(f"image {image!r} is not on this Docker engine") from None


def export_image_tree(client: Any, spec: WorkspaceSpec, dest: Path) -> None:
    """Copy ``spec.image_workdir`` out of ``spec.image`` into the empty folder ``dest``."""
    import docker.errors

    workdir = posixpath.normpath(spec.image_workdir or "")
    container = client.api.create_container(spec.image, command=["true"], network_disabled=True,
                                            labels={"org.swe-openenv.export": "1"})
    try:
        try:
            stream, _stat = client.api.get_archive(container["Id"], workdir + "/.")
        except docker.errors.NotFound:
            raise WorkspaceError(f"image {spec.image!r} has no {workdir}") from None
        with tempfile.TemporaryFile(dir=dest.parent) as buf:
            for chunk in stream:
                buf.write(chunk)
            buf.seek(0)
            with tarfile.open(fileobj=buf) as tf:
                members = tf.getmembers()
                top = members[0].name.split("/", 1)[0] if members else "."
                for m in members:  # "<base>/..." -> "..."
                    m.name = m.name[len(top) + 1:] if m.name.startswith(top + "/") else ""
                tf.extractall(dest, members=[m for m in members if m.name], filter="tar")
    finally:
        client.api.remove_container(container["Id"], force=True)
    for dirpath, dirnames, filenames in os.walk(dest):  # the session uid reads the template
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            if not os.path.islink(full):
                mode = os.lstat(full).st_mode
                os.chmod(full, mode | 0o444 | (0o111 if name in dirnames else 0))


def _dockerfile(source_id: str, workdir: str, tools: tuple[str, ...]) -> str:
    quoted = " ".join(tools)
    return "\n".join([
        f"FROM {source_id}",
        "USER root",
        "COPY harden_image.sh /tmp/harden_image.sh",
        f"RUN bash /tmp/harden_image.sh {quoted} && rm -f /tmp/harden_image.sh "
        f"&& rm -rf {workdir} && mkdir -p /workspace /.swe/template /.swe/private "
        f"&& ln -s /workspace {workdir}",
        "WORKDIR /workspace",
        f'LABEL {TOOLS_LABEL}="{quoted}" {SOURCE_LABEL}="{source_id}"',
        "",
    ])


def derived_image(client: Any, image: str, workdir: str, tools: tuple[str, ...]) -> str:
    """The hardened session image of ``image`` (built once, offline); returns its tag."""
    import docker.errors

    source_id = image_id(client, image)
    workdir = posixpath.normpath(workdir)
    if workdir in ("/", "/workspace", "/tmp", "/.swe") or not workdir.startswith("/"):
        raise WorkspaceError(f"workdir {workdir!r} cannot hold an image-resident repository")
    dockerfile = _dockerfile(source_id, workdir, tools)
    script = HARDEN_SCRIPT.read_bytes()
    key = hashlib.sha256("\0".join([DERIVED_RECIPE, dockerfile]).encode() + script).hexdigest()[:20]
    tag = f"{DERIVED_REPO}:{key}"
    try:
        client.api.inspect_image(tag)
        return tag
    except docker.errors.ImageNotFound:
        pass
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tf:
        for name, data in (("Dockerfile", dockerfile.encode()), ("harden_image.sh", script)):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            tf.addfile(info, io.BytesIO(data))
    context.seek(0)
    try:
        client.images.build(fileobj=context, custom_context=True, tag=tag, network_mode="none", rm=True,
                            forcerm=True, pull=False)
    except docker.errors.BuildError as exc:
        lines = [str(item.get("stream") or item.get("error") or "").strip() for item in exc.build_log]
        detail = " | ".join(line for line in lines if line)[-1500:]
        raise SandboxStartError(f"could not derive a session image from {image!r}: {detail}") from None
    except docker.errors.APIError as exc:
        raise SandboxStartError(f"could not derive a session image from {image!r}: {exc}") from None
    return tag


def apply_setup_patch(tree: Path, patch: str) -> None:
    """Apply a task's setup patch (e.g. SWE-smith's bug patch) to an exported tree."""
    if not patch.strip():
        return
    proc = run_git(["apply", "--whitespace=nowarn", "-"], tree, input=patch.encode(), check=False)
    if proc.returncode != 0:
        raise WorkspaceError(f"the task's setup_patch does not apply: {proc.stderr.decode(errors='replace')[-800:]}")
