"""``env-server prefetch`` and ``env-server images``: a dataset's task images before and while serving.

``prefetch --tasks FILE`` pulls and derives every image the task file names (resumable: present
images cost one inspect), with a progress line and a summary of bytes and time; ``images`` lists
what the project pulled or derived (size, last use, budget) and ``images --evict-to GB`` trims it.
Both read the same settings as ``serve`` (``--config``, ``--set``, the image flags), so they act on
the cache and engine the server uses (``sandbox/images.py``): the docker backend's (``sandbox.backend``
is docker where the settings name no backend; the docker defaults where they name another).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any, Callable

PREFETCH_FLAGS = ("--tasks", "--image-cache-gb", "--max-pulls")
IMAGES_FLAGS = ("--image-cache-gb",)


def add_image_commands(sub: Any, add_settings: Callable[[argparse.ArgumentParser], None],
                       add_flags: Callable[..., None], load_config: Callable[[argparse.Namespace], Any]) -> None:
    """``prefetch`` and ``images`` on ``sub``, with the settings flags ``serve`` has; ``load_config``
    gives the settings of parsed arguments (None after printing why they are invalid)."""
    pre = sub.add_parser("prefetch", help="pull and derive the images of a task file (before serving it)")
    add_settings(pre)
    add_flags(pre, PREFETCH_FLAGS)
    pre.add_argument("--parallel", type=int, default=4, metavar="N", help="images at once (default 4; pulls are "
                     "also bounded by sandbox.backend.images.max_pulls)")
    pre.set_defaults(func=lambda args: _prefetch(args, load_config(args)))
    images = sub.add_parser("images", help="the images this project pulled or derived: size, last use, budget")
    add_settings(images)
    add_flags(images, IMAGES_FLAGS)
    images.add_argument("--evict-to", type=float, default=None, metavar="GB",
                        help="remove least recently used images until they take at most GB (none in use)")
    images.add_argument("--json", action="store_true", help="one JSON object per image")
    images.set_defaults(func=lambda args: _images(args, load_config(args)))


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit in ("B", "KB") else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def _ago(t: float) -> str:
    if not t:
        return "never"
    s = max(0, time.time() - t)
    for unit, span in (("d", 86400), ("h", 3600), ("min", 60)):
        if s >= span:
            return f"{s / span:.0f} {unit} ago"
    return f"{s:.0f} s ago"


def _prefetch(args: argparse.Namespace, config: Any) -> int:
    from sandbox.backends import DockerBackend
    from sandbox.images import Prefetched, prefetch
    from sandbox.models import SandboxStartError
    from verifier.task import TaskFileError, load_tasks

    if config is None:
        return 2
    if config.tasks_path is None:
        print("env-server prefetch: give --tasks FILE", file=sys.stderr)
        return 2
    try:
        tasks = load_tasks(config.tasks_path)
    except TaskFileError as exc:
        print(f"env-server prefetch: {exc}", file=sys.stderr)
        return 2
    specs = [t.workspace_spec() for t in tasks]
    images = {s.image for s in specs if s.image}
    if not images:
        print(f"env-server prefetch: the {len(tasks)} tasks of {config.tasks_path} name no image: nothing to fetch")
        return 0
    sandbox = config.sandbox
    settings = DockerBackend.of(sandbox).images
    budget = f", budget {settings.cache_gb:g} GB" if settings.cache_gb else ""
    print(f"prefetching {len(images)} images of {len(tasks)} tasks ({args.parallel} at once, "
          f"{settings.max_pulls} pulls at once{budget})", flush=True)
    start = time.monotonic()
    seen: list[Prefetched] = []
    tty = sys.stdout.isatty()

    def done(result: Prefetched) -> None:
        seen.append(result)
        elapsed = time.monotonic() - start
        left = len(images) - len(seen)
        eta = f", about {elapsed / len(seen) * left / 60:.0f} min left" if left and len(seen) >= 2 else ""
        pulled = sum(r.bytes for r in seen if r.status == "pulled")
        line = (f"[{len(seen)}/{len(images)}] {result.status:8} {result.image} ({result.seconds:.1f} s)"
                f" | {_size(pulled)} pulled in {elapsed:.0f} s{eta}")
        if result.error:
            line += f"\n    {result.error}"
        print(("\r" if tty else "") + line, flush=True)

    try:
        results = asyncio.run(prefetch(specs, sandbox, parallel=args.parallel, done=done))
    except SandboxStartError as exc:  # no engine at all
        print(f"env-server prefetch: {exc}", file=sys.stderr)
        return 1
    by = {status: [r for r in results if r.status == status] for status in ("pulled", "present", "failed", "skipped")}
    print(f"prefetch done in {time.monotonic() - start:.0f} s: {len(by['pulled'])} pulled "
          f"({_size(sum(r.bytes for r in by['pulled']))}), {len(by['present'])} already present, "
          f"{len(by['failed'])} failed, {len(by['skipped'])} skipped (budget reached: pulled on demand)")
    for r in by["failed"]:
        print(f"  failed: {r.image} ({r.tasks} task{'s' if r.tasks != 1 else ''}): {r.error}", file=sys.stderr)
    return 1 if by["failed"] else 0


def _images(args: argparse.Namespace, config: Any) -> int:
    from sandbox.backends import DockerBackend
    from sandbox.images import GB, image_store
    from sandbox.models import SandboxStartError

    if config is None:
        return 2
    store = image_store(config.sandbox)
    if args.evict_to is not None:
        try:
            gone = store.evict_to(int(args.evict_to * GB))
        except SandboxStartError as exc:
            print(f"env-server images: {exc}", file=sys.stderr)
            return 1
        print(f"evicted {len(gone)} image{'s' if len(gone) != 1 else ''}" + (f": {', '.join(gone)}" if gone else ""))
    records = sorted(store.ledger.read().values(), key=lambda r: -r.last_used)
    if args.json:
        for rec in records:
            print(json.dumps(rec.model_dump()))
        return 0
    width = max([len(r.image) for r in records] + [5])
    print(f"{'IMAGE':{width}}  {'KIND':7}  {'SIZE':>9}  {'LAST USED':>12}  SOURCE")
    for rec in records:
        print(f"{rec.image:{width}}  {rec.kind:7}  {_size(rec.own_bytes):>9}  {_ago(rec.last_used):>12}  "
              f"{rec.source or ''}")
    budget = DockerBackend.of(config.sandbox).images.cache_gb
    print(f"{len(records)} image{'s' if len(records) != 1 else ''} pulled or derived by this project: "
          f"{_size(store.usage())}" + (f" of a {budget:g} GB budget" if budget else " (no budget: "
          "sandbox.backend.images.cache_gb / --image-cache-gb)") + f"; ledger {store.ledger.path}")
    return 0
