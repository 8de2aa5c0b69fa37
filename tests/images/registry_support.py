"""A real container registry on loopback for the image-store tests (imported by name:
tests/images is on sys.path, like tests/docker's docker_support).

:class:`LoopbackRegistry` runs Debian's ``docker-registry`` (distribution 2.8, apt package
``docker-registry``, installed by .ci/system-deps.sh) as a child process on 127.0.0.1 and a
free port, with filesystem storage in a temporary directory, deletes enabled and no auth.
The engine treats registries in 127.0.0.0/8 as insecure by default (``docker info``:
Insecure Registries), so it pushes to and pulls from ``127.0.0.1:PORT/name:tag`` over plain
http with no engine configuration. Nothing here names any other registry host.

:func:`push_unique_image` makes an image with a new id from a local one (``FROM source`` +
a random label, built with no network), pushes it and removes it locally, so that a later
pull really fetches it. The source's layers stay local, so a pull fetches only the manifest
and config (``fresh_layer=N`` adds a layer of N random bytes that it must download too),
and once a source's layers are in the registry (the first push: ~5 s for the ~120 MB base)
later pushes send only the config and manifest. To push a SWE-bench-layout image for a task-level test, pass
one of the local ``swe-openenv-layout/<repo>:<version>-<hash>`` images
(:func:`layout_images`; ``docker images | grep swe-openenv-layout``) as ``source_image``.
"""

from __future__ import annotations

import atexit
import json
import os
import secrets
import shutil
import socket
import subprocess
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from io import BytesIO
from pathlib import Path
from typing import Any, Self

BINARY = "docker-registry"
TOKEN_LABEL = "org.swe-openenv.test-token"

CONFIG = """\
version: 0.1
log:
  level: {level}
  accesslog:
    disabled: {no_accesslog}
storage:
  filesystem:
    rootdirectory: {root}
  delete:
    enabled: true
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: 127.0.0.1:{port}
  secret: {secret}
"""


def registry_binary() -> str | None:
    """Path of ``docker-registry``, or None when it is not installed."""
    return shutil.which(BINARY)


_LIVE: set[LoopbackRegistry] = set()  # started and not yet stopped


@atexit.register
def _stop_all() -> None:
    """At interpreter exit, stop (and clean up) any registry a test left running."""
    for reg in list(_LIVE):
        reg.close()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RegistryError(RuntimeError):
    """The registry did not start, or a push to it failed."""


class LoopbackRegistry:
    """``docker-registry serve`` on 127.0.0.1:PORT, storage under a temporary directory.

    ``start()`` (or ``with``) starts it and waits until ``GET /v2/`` answers; ``stop()``
    ends the process by its pid (terminate, wait, kill) and makes the registry unreachable,
    for failure tests; ``start()`` again brings it back on the same port with the same
    storage. ``close()`` also removes the storage.
    """

    def __init__(self, root: str | os.PathLike | None = None, *, port: int | None = None,
                 binary: str | None = None, log_level: str = "info", access_log: bool = False) -> None:
        self.binary = binary or registry_binary()
        if not self.binary:
            raise RegistryError(f"{BINARY} is not on PATH (apt-get install docker-registry)")
        self._own_root = root is None
        self.root = Path(tempfile.mkdtemp(prefix="swe-registry-")) if root is None else Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.port = port
        self.log_level = log_level
        self.access_log = access_log
        self.proc: subprocess.Popen | None = None

    # -- where ---------------------------------------------------------------------------
    @property
    def host(self) -> str:
        """``127.0.0.1:PORT``: the prefix of this registry's image references."""
        if self.port is None:
            raise RegistryError("the registry was never started")
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.host}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def log_path(self) -> Path:
        return self.root / "registry.log"

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    # -- life ----------------------------------------------------------------------------
    def start(self, timeout: float = 20.0) -> Self:
        """Start the process (no-op when running) and wait until ``GET /v2/`` answers 200."""
        if self.running:
            return self
        fixed = self.port is not None
        for _attempt in range(1 if fixed else 5):  # a free port can be taken before we bind it
            if not fixed:
                self.port = _free_port()
            if self._spawn(timeout):
                return self
        raise RegistryError(f"{BINARY} did not start on {self.host}:\n{self.log_tail()}")

    def _spawn(self, timeout: float) -> bool:
        storage = self.root / "storage"
        storage.mkdir(exist_ok=True)
        config = self.root / "config.yml"
        config.write_text(CONFIG.format(level=self.log_level, no_accesslog=str(not self.access_log).lower(),
                                        root=storage, port=self.port, secret=secrets.token_hex(16)))
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([self.binary, "serve", str(config)], stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=subprocess.STDOUT)
        _LIVE.add(self)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:  # exited: port taken, bad config ...
                self.proc = None
                return False
            try:
                with urllib.request.urlopen(f"{self.url}/v2/", timeout=2) as resp:
                    if resp.status == 200:
                        return True
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.05)
        self.stop()
        raise RegistryError(f"{BINARY} on {self.host} did not answer GET /v2/ in {timeout:.0f}s:\n"
                            f"{self.log_tail()}")

    def stop(self, timeout: float = 10.0) -> None:
        """End the process by its pid: SIGTERM, wait, then SIGKILL. The port then refuses."""
        proc, self.proc = self.proc, None
        _LIVE.discard(self)
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)

    def close(self) -> None:
        """Stop it and remove its storage (when it made the directory itself)."""
        self.stop()
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- what it holds -------------------------------------------------------------------
    def _get(self, path: str, accept: str | None = None) -> tuple[int, dict, Any]:
        req = urllib.request.Request(f"{self.url}{path}", headers={"Accept": accept} if accept else {})
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status, dict(resp.headers), json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            return exc.code, dict(exc.headers), json.loads(exc.read() or b"null")

    def tags(self, repo: str) -> list[str]:
        """The tags of ``repo`` (``name`` of ``127.0.0.1:PORT/name:tag``); [] when it has none."""
        status, _, body = self._get(f"/v2/{repo}/tags/list")
        if status == 404:
            return []
        if status != 200:
            raise RegistryError(f"GET /v2/{repo}/tags/list: HTTP {status}: {body}")
        return sorted((body or {}).get("tags") or [])

    def catalog(self) -> list[str]:
        status, _, body = self._get("/v2/_catalog")
        if status != 200:
            raise RegistryError(f"GET /v2/_catalog: HTTP {status}: {body}")
        return sorted(body.get("repositories") or [])

    def digest(self, repo: str, tag: str) -> str | None:
        """The manifest digest of ``repo:tag`` (Docker-Content-Digest), None when absent."""
        accept = ("application/vnd.docker.distribution.manifest.v2+json,"
                  "application/vnd.oci.image.manifest.v1+json")
        status, headers, _ = self._get(f"/v2/{repo}/manifests/{tag}", accept)
        return headers.get("Docker-Content-Digest") if status == 200 else None


# -- images ------------------------------------------------------------------------------
class PushedImage(str):
    """The full reference ``127.0.0.1:PORT/name:tag`` (a ``str``), with ``.image_id``
    (the image id the engine had, and that a pull gives back), ``.digest`` (the manifest
    digest in the registry) and ``.source`` (the image it was made from)."""

    image_id: str
    digest: str
    source: str

    def __new__(cls, reference: str, image_id: str, digest: str, source: str) -> Self:
        self = super().__new__(cls, reference)
        self.image_id, self.digest, self.source = image_id, digest, source
        return self


def remove_local(client: Any, *refs: str) -> None:
    """Remove local images/tags (by reference or id); absent ones are fine."""
    import docker.errors

    for ref in refs:
        try:
            client.images.remove(ref, force=True, noprune=False)
        except docker.errors.ImageNotFound:
            pass


def unique_image(client: Any, source_image: str, token: str | None = None, fresh_layer: int = 0) -> Any:
    """A new local image ``FROM source_image`` with a random label: a new id, the same layers.

    ``fresh_layer`` > 0 adds one layer of that many random bytes (``COPY``, no container
    runs), whose blob a pull must then download once the image is removed locally. Built
    with no network and no pull: the source must be local, or ``scratch`` with a
    ``fresh_layer`` (a one-layer image of a few KB, instant to push to an empty registry).
    Untagged: the caller tags it.
    """
    token = token or secrets.token_hex(8)
    dockerfile = f"FROM {source_image}\nLABEL {TOKEN_LABEL}={token}\n"
    files = {}
    if fresh_layer > 0:
        dockerfile += f"COPY blob /.swe-openenv-test/{token}\n"
        files["blob"] = os.urandom(fresh_layer)
    files["Dockerfile"] = dockerfile.encode()
    context = BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
            tar.addfile(info, BytesIO(data))
    context.seek(0)
    image, _logs = client.images.build(fileobj=context, custom_context=True, pull=False, rm=True,
                                       forcerm=True, network_mode="none")
    return image


def push_unique_image(client: Any, registry: LoopbackRegistry, source_image: str, name: str,
                      tag: str | None = None, fresh_layer: int = 0) -> PushedImage:
    """Push an image with a new id derived from local ``source_image`` as ``name:tag``.

    Makes it (:func:`unique_image`; ``fresh_layer``: bytes of a new random layer, so that a
    pull downloads a blob too, not only the manifest and config), tags it
    ``127.0.0.1:PORT/name:tag`` (``tag``: a random one by default), pushes it (each streamed
    event checked for an error), then removes the local tag and the image of that id, so
    that a pull must fetch it. Returns the full reference, with the pushed image's id and
    manifest digest (:class:`PushedImage`).
    """
    tag = tag or secrets.token_hex(6)
    repository = f"{registry.host}/{name}"
    reference = f"{repository}:{tag}"
    image = unique_image(client, source_image, fresh_layer=fresh_layer)
    digest = None
    try:
        image.tag(repository, tag=tag)
        for event in client.images.push(repository, tag=tag, stream=True, decode=True):
            if event.get("error") or event.get("errorDetail"):
                detail = event.get("errorDetail") or {}
                raise RegistryError(f"push of {reference} failed: {event.get('error') or detail.get('message')}")
            digest = (event.get("aux") or {}).get("Digest") or digest
    finally:
        remove_local(client, reference, image.id)
    if not digest:
        raise RegistryError(f"push of {reference} reported no digest")
    return PushedImage(reference, image.id, digest, source_image)


def layout_images(client: Any) -> list[str]:
    """The local SWE-bench-layout images (``swe-openenv-layout/<repo>:<tag>``), smallest first.

    Built by docker/swebench_layout.py (run by tests/docker/test_swebench_layout.py; a few
    hundred MB each, on swe-openenv-base:bookworm); pass one as ``source_image`` for a
    task-level test of pull-on-demand.
    """
    images = client.images.list(filters={"reference": "swe-openenv-layout/*"})
    refs = [(img.attrs.get("Size", 0), t) for img in images for t in img.tags
            if t.startswith("swe-openenv-layout/")]
    return [t for _, t in sorted(refs)]
