"""Task images on a Docker engine: pulled on demand, derived once, kept under a disk budget.

SWE-bench-family datasets name one image per instance (one to several GB each). The
:class:`ImageStore` of an engine makes a session on such a task start whether or not its
image is on the engine yet:

- **pull on demand**: a missing image is pulled (registry credentials as the engine's
  client finds them: ``~/.docker/config.json``), one pull per image however many sessions
  wait for it (single flight), at most ``ImageSettings.max_pulls`` at once on their own
  threads (so sessions on other tasks never wait for a pull), under a timeout, with
  progress in the log and in :meth:`ImageStore.stats` (the server's ``/metrics``);
- **derive once**: the hardened session image (``image_workspace.derived_image``) and the
  workspace template (``workspace.prepare_template``) are made once per source, also under
  concurrency; waiting sessions await a future on the event loop, never a blocked thread;
- **disk budget**: what the store pulled or derived is written to a ledger
  (``<cache>/images/ledger.json``, shared by the processes that share the cache) with its
  size and last use; over ``ImageSettings.cache_gb`` the least recently used are removed,
  never one a live session or a pending reset holds (:meth:`ImageStore.hold`), never one a
  container uses (the engine refuses), never an image the user put there (not in the ledger).

A pull that fails raises :class:`ImageUnavailable` (the image and the registry's reason);
nothing else is affected.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import fcntl
import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from pydantic import BaseModel, ConfigDict, Field

from .image_workspace import derived_image
from .backends import DockerBackend, ImageSettings
from .models import ImageUnavailable, SandboxConfig, SandboxStartError, WorkspaceSpec

_log = logging.getLogger(__name__)
GB = 1024 ** 3
PROGRESS_EVERY_S = 5.0  # a pull's progress line in the log at most this often
TOUCH_EVERY_S = 30.0  # a held image's last use reaches the ledger at most this often
PRESENT_TTL_S = 60.0  # an image seen on the engine is not asked about again for this long


class ImageRecord(BaseModel):
    """One image the project pulled or derived (a ledger entry)."""

    model_config = ConfigDict(extra="forbid")

    image: str
    kind: str = Field(description="'pulled' (absent, then pulled by a session or prefetch) or 'derived'")
    id: str = ""
    size: int = Field(0, description="the image's size as the engine reports it (shared layers included)")
    source: str | None = Field(None, description="derived: the task image it was made from")
    source_size: int = Field(0, description="derived: its source's size (what it adds is size - source_size)")
    added: float = 0.0
    last_used: float = 0.0

    @property
    def own_bytes(self) -> int:
        """What it takes beyond its source: a pulled image whole, a derived one its hardening layer."""
        return max(self.size - self.source_size if self.kind == "derived" else self.size, 0)


class _Ledger:
    """The records of one cache directory, read and written under an exclusive file lock."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)

    @contextlib.contextmanager
    def edit(self) -> Iterator[dict[str, ImageRecord]]:
        with open(self.path.with_suffix(".lock"), "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            records = self._read()
            yield records
            tmp = self.path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(json.dumps({k: r.model_dump() for k, r in sorted(records.items())}, indent=1))
            os.replace(tmp, self.path)

    def read(self) -> dict[str, ImageRecord]:
        with open(self.path.with_suffix(".lock"), "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_SH)
            return self._read()

    def _read(self) -> dict[str, ImageRecord]:
        try:
            raw = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except ValueError:
            _log.warning("image ledger %s is unreadable: starting a new one", self.path)
            return {}
        out = {}
        for key, value in raw.items() if isinstance(raw, dict) else ():
            with contextlib.suppress(ValueError):
                out[key] = ImageRecord.model_validate(value)
        return out


class _SingleFlight:
    """At most one run of a job per key at a time: later callers get the running job's future."""

    def __init__(self, executor: concurrent.futures.Executor) -> None:
        self._executor = executor
        # re-entrant: a job done before its callback is added runs ``_forget`` at once, under ``run``'s lock
        self._lock = threading.RLock()
        self._running: dict[Any, concurrent.futures.Future] = {}

    def run(self, key: Any, job: Callable[[], Any]) -> concurrent.futures.Future:
        with self._lock:
            fut = self._running.get(key)
            if fut is None:
                fut = self._running[key] = self._executor.submit(job)
                fut.add_done_callback(lambda _f, key=key: self._forget(key))
            return fut

    def _forget(self, key: Any) -> None:
        with self._lock:
            self._running.pop(key, None)

    def running(self) -> list[Any]:
        with self._lock:
            return list(self._running)


class ImageStore:
    """The task images of one Docker engine as this process sees them (see the module docstring).

    Made by :func:`image_store`; thread-safe; its blocking work runs on its own threads and its
    async methods await futures, so they may be called from any event loop.
    """

    def __init__(self, client: Callable[[], Any], cache: Path, settings: ImageSettings) -> None:
        self.client = client
        self.settings = settings
        self.ledger = _Ledger(cache / "images" / "ledger.json")
        self._pulls = _SingleFlight(concurrent.futures.ThreadPoolExecutor(settings.max_pulls, "image-pull"))
        self._prepare = _SingleFlight(concurrent.futures.ThreadPoolExecutor(4, "image-prepare"))
        self._evicting = _SingleFlight(concurrent.futures.ThreadPoolExecutor(1, "image-evict"))
        self._lock = threading.Lock()
        self._held: dict[str, int] = {}
        self._touched: dict[str, float] = {}
        self._present_until: dict[str, float] = {}  # image -> until when it is taken as present unasked
        self._derived_until: dict[tuple, tuple[str, float]] = {}  # (image, workdir, tools) -> (tag, until)
        self._progress: dict[str, tuple[int, int]] = {}  # image -> (bytes done, bytes known) of a running pull
        self.counters = {"pulls": 0, "pull_failures": 0, "pulled_bytes": 0, "pull_seconds": 0.0,
                         "derived": 0, "evicted": 0, "evicted_bytes": 0}

    # -- leases -------------------------------------------------------------------------------------
    def hold(self, *images: str) -> Callable[[], None]:
        """Keep ``images`` from eviction until the returned function is called (once)."""
        now = time.time()
        stale = []
        with self._lock:
            for image in images:
                self._held[image] = self._held.get(image, 0) + 1
                if now - self._touched.get(image, 0.0) > TOUCH_EVERY_S:
                    self._touched[image] = now
                    stale.append(image)
        if stale:
            self._touch(stale, now)
        released = threading.Event()

        def release() -> None:
            if released.is_set():
                return
            released.set()
            with self._lock:
                for image in images:
                    left = self._held.get(image, 0) - 1
                    if left > 0:
                        self._held[image] = left
                    else:
                        self._held.pop(image, None)

        return release

    def held(self) -> set[str]:
        with self._lock:
            return set(self._held)

    def _touch(self, images: list[str], now: float) -> None:
        try:
            with self.ledger.edit() as records:
                for image in images:
                    if image in records:
                        records[image].last_used = now
        except OSError as exc:  # a read-only cache: the budget then sees older uses, nothing breaks
            _log.warning("could not record the use of %s: %s", images, exc)

    # -- present, derived, template ---------------------------------------------------------------------
    async def present(self, image: str) -> bool:
        """Make ``image`` present on the engine: nothing when it is, else one pull shared by every
        caller waiting for it; whether it was pulled. Raises ImageUnavailable (the registry's reason)
        or SandboxStartError."""
        if self._known_present(image):
            return False
        pull = self._pulls.run(("pull", image), lambda: self._pull(image))
        try:  # the pull checks its deadline between progress events; a registry gone silent is caught here
            return await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(pull)),
                                          self.settings.pull_timeout_s + 30)
        except asyncio.TimeoutError:
            raise ImageUnavailable(image, f"the pull took longer than {self.settings.pull_timeout_s:g} s "
                                          "(sandbox.backend.images.pull_timeout_s)") from None

    async def derived(self, image: str, workdir: str, tools: tuple[str, ...]) -> str:
        """The hardened session image of the present ``image`` (built once; its tag; known for
        ``PRESENT_TTL_S`` after each look, as a present image is)."""
        key = (image, workdir, tools)
        with self._lock:
            tag, until = self._derived_until.get(key, ("", 0.0))
        if until > time.monotonic():
            return tag
        job = self._prepare.run(("derive", *key), lambda: self._derive(image, workdir, tools))
        tag = await asyncio.wrap_future(job)
        with self._lock:
            self._derived_until[key] = (tag, time.monotonic() + PRESENT_TTL_S)
        return tag

    async def prepare(self, spec: WorkspaceSpec, config: SandboxConfig,
                      template: bool = True) -> tuple[str, Any, Callable[[], None]]:
        """What a docker session on ``spec`` runs: the image it starts (the task's image present, pulled
        once; an image-resident task's hardened image, built once), the workspace template (made once;
        None when ``template`` is false), and the function that releases the hold on those images (held
        from the start, so that eviction never takes an image a pending reset waits for)."""
        release = self.hold(*(image for image in (spec.image,) if image))
        try:
            if spec.image:
                await self.present(spec.image)
            if spec.image_resident:
                assert spec.image is not None and spec.image_workdir is not None
                image = await self.derived(spec.image, spec.image_workdir, config.policy.blocked_tools)
                release = _chain(release, self.hold(image))
            else:
                image = spec.image or DockerBackend.of(config).image
            tree = await self.template(spec, config) if template else None
        except BaseException:
            release()
            raise
        return image, tree, release

    async def template(self, spec: WorkspaceSpec, config: SandboxConfig) -> Any:
        """``workspace.prepare_template`` of ``spec``, run once for concurrent callers."""
        from .workspace import prepare_template

        key = ("template", spec.model_dump_json(), str(config.cache_dir), config.policy.model_dump_json())
        return await asyncio.wrap_future(self._prepare.run(key, lambda: prepare_template(spec, config)))

    def _known_present(self, image: str) -> bool:
        with self._lock:
            return self._present_until.get(image, 0.0) > time.monotonic()

    def _seen_present(self, image: str) -> None:
        with self._lock:
            self._present_until[image] = time.monotonic() + PRESENT_TTL_S

    def _pull(self, image: str) -> bool:
        import docker.errors

        client = self.client()
        try:
            client.api.inspect_image(image)
            self._seen_present(image)
            return False
        except docker.errors.ImageNotFound:
            pass
        except docker.errors.DockerException as exc:
            raise SandboxStartError(f"cannot inspect image {image!r}: {exc}") from None
        if not self.settings.pull:
            raise ImageUnavailable(image, "it is not on this Docker engine and pulls are off "
                                          "(sandbox.backend.images.pull: false): pull it or run `env-server prefetch`")
        start = time.monotonic()
        deadline = start + self.settings.pull_timeout_s
        layers: dict[str, tuple[int, int]] = {}
        last_line = start
        _log.info("pulling %s", image)
        try:
            for event in client.api.pull(image, stream=True, decode=True):
                if event.get("error"):
                    raise ImageUnavailable(image, str(event.get("error")).strip())
                detail = event.get("progressDetail") or {}
                if event.get("id") and detail.get("total"):
                    if event.get("status") == "Downloading":
                        layers[event["id"]] = (int(detail.get("current") or 0), int(detail["total"]))
                elif event.get("id") and event.get("status") in ("Download complete", "Pull complete",
                                                                  "Already exists"):
                    done = layers.get(event["id"])
                    if done:
                        layers[event["id"]] = (done[1], done[1])
                got, known = sum(c for c, _ in layers.values()), sum(t for _, t in layers.values())
                with self._lock:
                    self._progress[image] = (got, known)
                now = time.monotonic()
                if now - last_line >= PROGRESS_EVERY_S:
                    last_line = now
                    _log.info("pulling %s: %.0f of %.0f MB in %.0f s", image, got / 2**20, known / 2**20, now - start)
                if now > deadline:
                    raise ImageUnavailable(image, f"the pull took longer than {self.settings.pull_timeout_s:g} s "
                                                  "(sandbox.backend.images.pull_timeout_s)")
            info = client.api.inspect_image(image)
        except ImageUnavailable:
            self._count_failure(image)
            raise
        except docker.errors.ImageNotFound as exc:
            self._count_failure(image)
            raise ImageUnavailable(image, _reason(exc)) from None
        except docker.errors.APIError as exc:
            self._count_failure(image)
            if exc.is_server_error() or exc.status_code == 404 or exc.status_code in (401, 403):
                raise ImageUnavailable(image, _reason(exc)) from None
            raise SandboxStartError(f"the engine refused to pull {image!r}: {_reason(exc)}") from None
        except docker.errors.DockerException as exc:  # the engine itself is unreachable: infrastructure
            self._count_failure(image)
            raise SandboxStartError(f"could not pull {image!r}: {exc}") from None
        finally:
            with self._lock:
                self._progress.pop(image, None)
        seconds = time.monotonic() - start
        got = sum(c for c, _ in layers.values())
        with self._lock:
            self.counters["pulls"] += 1
            self.counters["pulled_bytes"] += got
            self.counters["pull_seconds"] += seconds
        _log.info("pulled %s (%.0f MB in %.1f s)", image, info.get("Size", 0) / 2**20, seconds)
        self._seen_present(image)
        self._record(ImageRecord(image=image, kind="pulled", id=info["Id"], size=int(info.get("Size") or 0)))
        return True

    def _count_failure(self, image: str) -> None:
        with self._lock:
            self.counters["pull_failures"] += 1
        _log.warning("pull of %s failed", image)

    def _derive(self, image: str, workdir: str, tools: tuple[str, ...]) -> str:
        client = self.client()
        tag = derived_image(client, image, workdir, tools)
        if tag not in self.ledger.read():  # built now, or by a process that kept no ledger here
            info, source = client.api.inspect_image(tag), client.api.inspect_image(image)
            self._record(ImageRecord(image=tag, kind="derived", id=info["Id"], size=int(info.get("Size") or 0),
                                     source=image, source_size=int(source.get("Size") or 0)))
            with self._lock:
                self.counters["derived"] += 1
        return tag

    def _record(self, record: ImageRecord) -> None:
        now = time.time()
        record.added = record.added or now
        record.last_used = now
        with self._lock:
            self._touched[record.image] = now
        with self.ledger.edit() as records:
            records[record.image] = record
        if self.settings.cache_gb is not None:
            self._evicting.run("evict", lambda: self.evict_to(int(self.settings.cache_gb * GB)))

    # -- the budget --------------------------------------------------------------------------------------
    def usage(self, records: dict[str, ImageRecord] | None = None) -> int:
        """Bytes the ledger's images take: a pulled image whole, a derived one by what it adds to its
        source (its hardening layer) when the source is here too."""
        records = self.ledger.read() if records is None else records
        return sum(_unit_bytes(group, records) for group in _units(records))

    def evict_to(self, budget_bytes: int) -> list[str]:
        """Remove least recently used ledger images until they take at most ``budget_bytes``; never
        one held here or used by a container (the engine refuses). Returns the removed images."""
        import docker.errors

        client = self.client()
        removed: list[str] = []
        held = self.held()
        with self.ledger.edit() as records:
            for name in list(records):  # gone from the engine (removed by hand): no longer counted
                try:
                    client.api.inspect_image(name)
                except docker.errors.ImageNotFound:
                    records.pop(name)
            used = self.usage(records)
            units = sorted(_units(records), key=lambda g: max(records[n].last_used for n in g))
            for group in units:
                if used <= budget_bytes:
                    break
                if held & set(group) or any(records[n].source in held for n in group if records[n].source):
                    continue
                freed = _unit_bytes(group, records)
                done = []
                for name in sorted(group, key=lambda n: records[n].kind != "derived"):  # children first
                    try:
                        client.api.remove_image(name, force=False)
                        done.append(name)
                    except docker.errors.ImageNotFound:
                        done.append(name)
                    except docker.errors.APIError as exc:  # in use by a container, or a child of another
                        _log.info("not evicting %s: %s", name, _reason(exc))
                        break
                for name in done:
                    records.pop(name, None)
                    with self._lock:
                        self._present_until.pop(name, None)
                        self._derived_until = {k: v for k, v in self._derived_until.items()
                                               if name not in (k[0], v[0])}
                if len(done) == len(group):
                    used -= freed
                    removed += done
                    with self._lock:
                        self.counters["evicted"] += len(done)
                        self.counters["evicted_bytes"] += freed
        if removed:
            _log.info("evicted %s (budget %.1f GB)", ", ".join(removed), budget_bytes / GB)
        return removed

    # -- what it shows -----------------------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        """Counters, pulls in flight with their progress, held images and the ledger's bytes."""
        with self._lock:
            progress = dict(self._progress)
            out: dict[str, Any] = dict(self.counters)
            out["held"] = len(self._held)
        out["pulls_in_flight"] = len(self._pulls.running())
        out["pull_progress"] = progress
        try:
            out["cache_bytes"] = self.usage()
        except OSError:
            out["cache_bytes"] = 0
        out["cache_budget_bytes"] = int(self.settings.cache_gb * GB) if self.settings.cache_gb else None
        return out


def _chain(*releases: Callable[[], None]) -> Callable[[], None]:
    def release() -> None:
        for one in releases:
            one()
    return release


def _units(records: dict[str, ImageRecord]) -> list[list[str]]:
    """Ledger images grouped as they are evicted: a pulled image with the images derived from it."""
    groups: dict[str, list[str]] = {}
    for name, rec in records.items():
        root = rec.source if rec.kind == "derived" and rec.source in records else name
        groups.setdefault(root, []).append(name)
    return list(groups.values())


def _unit_bytes(group: list[str], records: dict[str, ImageRecord]) -> int:
    """A pulled image counts whole, a derived one by the layer it adds to its source."""
    return sum(records[n].own_bytes for n in group)


def _reason(exc: Any) -> str:
    text = getattr(exc, "explanation", None) or str(exc)
    return str(text).strip()[:500]


# -- prefetch ---------------------------------------------------------------------------------------------
class Prefetched(BaseModel):
    """What prefetch did for one image."""

    image: str
    status: str = Field(description="'present' (already there), 'pulled', 'failed', or 'skipped' (budget reached)")
    seconds: float = 0.0
    bytes: int = Field(0, description="the image's size (pulled: what came down)")
    tasks: int = Field(1, description="tasks that run on it")
    error: str = ""


async def prefetch(specs: list[WorkspaceSpec], config: SandboxConfig, parallel: int = 4,
                   done: Callable[[Prefetched], None] | None = None) -> list[Prefetched]:
    """Pull and derive the images of ``specs`` (``parallel`` images at once; the store's own bound on
    pulls holds too). Resumable: present images cost one inspect. With a disk budget it stops
    before the budget is exceeded (the rest are pulled on demand). ``done`` sees each result."""
    import docker.errors

    store = image_store(config)
    settings = DockerBackend.of(config).images
    budget = int(settings.cache_gb * GB) if settings.cache_gb else None
    by_image: dict[str, list[WorkspaceSpec]] = {}
    for spec in specs:
        if spec.image:
            by_image.setdefault(spec.image, []).append(spec)
    gate = asyncio.Semaphore(max(1, parallel))
    results: list[Prefetched] = []

    async def one(image: str, group: list[WorkspaceSpec]) -> None:
        async with gate:
            start = time.monotonic()
            if budget is not None and await asyncio.to_thread(store.usage) >= budget:
                result = Prefetched(image=image, status="skipped", tasks=len(group),
                                    error="the image cache is at its budget (sandbox.backend.images.cache_gb)")
            else:
                try:
                    pulled = await store.present(image)
                    for workdir_spec in {(s.image_workdir or ""): s for s in group}.values():
                        _, _, release = await store.prepare(workdir_spec, config, template=False)
                        release()
                    size = int((await asyncio.to_thread(store.client().api.inspect_image, image)).get("Size") or 0)
                    result = Prefetched(image=image, status="pulled" if pulled else "present", tasks=len(group),
                                        bytes=size, seconds=time.monotonic() - start)
                except (SandboxStartError, docker.errors.DockerException) as exc:
                    result = Prefetched(image=image, status="failed", tasks=len(group),
                                        seconds=time.monotonic() - start, error=str(exc))
            results.append(result)
            if done is not None:
                done(result)

    await asyncio.gather(*(one(image, group) for image, group in by_image.items()))
    return results


# -- one store per engine and cache ------------------------------------------------------------------------
_stores: dict[tuple[str | None, str], ImageStore] = {}
_stores_lock = threading.Lock()


def image_store(config: SandboxConfig) -> ImageStore:
    """The process's :class:`ImageStore` of ``config``'s engine and cache (made on first use; the
    settings of the first caller stay)."""
    from .docker_engine import docker_client
    from .workspace import cache_root

    cache, docker = cache_root(config), DockerBackend.of(config)
    key = (docker.url, str(cache))
    with _stores_lock:
        store = _stores.get(key)
        if store is None:
            store = _stores[key] = ImageStore(lambda: docker_client(docker.url), cache, docker.images)
        return store


def image_stores() -> list[ImageStore]:
    """Every store this process made (for metrics)."""
    with _stores_lock:
        return list(_stores.values())


__all__ = ["ImageRecord", "ImageSettings", "ImageStore", "ImageUnavailable", "Prefetched", "image_store",
           "image_stores", "prefetch"]
