"""Multi-process runs (`accelerate launch --num_processes N`, DDP or FSDP): gathering over the ranks.

Every rank runs its own rollouts through its own replica pool (whose round robin starts at the
rank, so the ranks spread their sessions over the replicas). TRL gathers rewards and its own
metrics over the ranks; the trainer's env and loss-channel metrics go through `gather_objects`
/ `merge_metrics` so that a logged value covers the global batch, not rank 0's share.
`write_rank_report` (output.rank_report) leaves one JSON per rank at the end of a run: its
sessions per replica, its rollouts and a digest of its full (unsharded) parameters.
"""

from __future__ import annotations

import hashlib
import json
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Iterable

__all__ = ["allow_cpu_fsdp", "gather_objects", "merge_metrics", "parameters_digest", "write_rank_report"]


def gather_objects(trainer: Any, obj: Any) -> list:
    """`obj` of every rank, in rank order: a collective, so every rank must call it (alone when single-process)."""
    accelerator = getattr(trainer, "accelerator", None)
    if accelerator is None or accelerator.num_processes == 1:
        return [obj]
    from accelerate.utils import gather_object

    return gather_object([obj])


def merge_metrics(per_rank: Iterable[dict[str, float]], sums: Iterable[str] = ()) -> dict[str, float]:
    """One dict from the ranks' metric dicts: keys in `sums` are added, the others averaged over the
    ranks that have them (the ranks' batches are of equal size)."""
    per_rank = list(per_rank)
    sums = set(sums)
    out: dict[str, float] = {}
    for key in sorted(set().union(*per_rank)):
        values = [float(m[key]) for m in per_rank if key in m]
        out[key] = sum(values) if key in sums else sum(values) / len(values)
    return out


def parameters_digest(model: Any) -> tuple[str, bool]:
    """(sha256 of every parameter's full values by name, whether any was sharded). FSDP2 shards
    (DTensor) are gathered and FSDP1 is unsharded (`summon_full_params`): a collective there."""
    context = nullcontext()
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP1

        if isinstance(model, FSDP1):
            context = FSDP1.summon_full_params(model, writeback=False)
    except ImportError:  # pragma: no cover - torch without distributed
        FSDP1 = None
    digest, sharded = hashlib.sha256(), FSDP1 is not None and isinstance(model, FSDP1)
    with context:
        for name, param in model.named_parameters():
            tensor = param.detach()
            if hasattr(tensor, "full_tensor"):  # DTensor
                sharded, tensor = True, tensor.full_tensor()
            name = name.replace("_fsdp_wrapped_module.", "").removeprefix("module.")
            digest.update(name.encode())
            digest.update(tensor.float().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest(), sharded


def write_rank_report(trainer: Any, pool: Any, directory: str | Path, **extra: Any) -> Path:
    """Write `<directory>/rank<k>.json` on every rank (call on all of them: the digest is a collective)."""
    accelerator = trainer.accelerator
    digest, sharded = parameters_digest(trainer.model_wrapped if hasattr(trainer, "model_wrapped") else trainer.model)
    report = {
        "rank": accelerator.process_index,
        "world_size": accelerator.num_processes,
        "distributed_type": str(accelerator.distributed_type).split(".")[-1],
        "sharded": sharded,
        "global_step": trainer.state.global_step,
        "sessions_by_replica": dict(getattr(pool, "opened", {})),
        "rollouts": getattr(trainer, "rollouts_local", None),
        "param_digest": digest,
        **extra,
    }
    path = Path(directory) / f"rank{accelerator.process_index}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1))
    return path


def allow_cpu_fsdp() -> bool:
    """Let `accelerate launch` with an FSDP config shard on CPU ranks (gloo), as it does on GPUs.

    accelerate 1.15's AcceleratorState turns a run into FSDP only from a multi-GPU-like type: on
    CPU ranks (MULTI_CPU) it drops the FSDP plugin and silently runs DDP. When the launcher asked
    for FSDP (ACCELERATE_USE_FSDP=true) and the ranks are CPU ones, this promotes MULTI_CPU to FSDP
    with the launcher's plugin, on every AcceleratorState() (each one re-copies PartialState's type).
    Returns whether it patched (call before the trainer is built).
    """
    import os

    if os.environ.get("ACCELERATE_USE_FSDP", "false").lower() != "true":
        return False
    from accelerate.state import AcceleratorState
    from accelerate.utils import DistributedType

    if getattr(AcceleratorState.__init__, "_cpu_fsdp", False):
        return True
    original = AcceleratorState.__init__

    def __init__(self, *args: Any, fsdp_plugin: Any = None, **kwargs: Any) -> None:
        original(self, *args, fsdp_plugin=fsdp_plugin, **kwargs)  # (re)copies PartialState's MULTI_CPU
        plugin = fsdp_plugin or getattr(self, "fsdp_plugin", None)
        if plugin is not None and self.distributed_type == DistributedType.MULTI_CPU:
            self.distributed_type = DistributedType.FSDP
            self.fsdp_plugin = plugin

    __init__._cpu_fsdp = True  # type: ignore[attr-defined]
    AcceleratorState.__init__ = __init__
    return True
