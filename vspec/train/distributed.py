"""The processes of a run: one, or one per device under torchrun (DDP; NCCL on GPUs, gloo on CPUs)."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from .validators import cpu_count

__all__ = ["Dist", "finish", "init_distributed", "pick_device", "ranks_in_sync", "workers_for"]


@dataclass
class Dist:
    """The processes of a run: this one's rank, their count (`world`) and its device index on its host
    (`local_rank`); one process is Dist()."""
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        """Whether this is rank 0, the process that logs and writes the run's files."""
        return self.rank == 0


def init_distributed(device_kind: str) -> Dist:
    """The run's processes: under torchrun (WORLD_SIZE > 1) the process group is started, else one process.

    Args:
        device_kind: "cuda" (NCCL) or another kind (gloo)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return Dist()
    backend = "nccl" if device_kind == "cuda" else "gloo"
    dist.init_process_group(backend=backend)
    return Dist(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")))


def pick_device(cfg, d: Dist) -> torch.device:
    """The device of this process: the CPU (--device cpu, or auto without CUDA), else its CUDA device
    (selected as the current one); a ValueError line when --device cuda finds none.

    Args:
        cfg: the run's RunConfig (its `device`: "auto", "cpu" or "cuda").
        d: the run's processes."""
    if cfg.device == "cpu" or (cfg.device == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA device is available")
    torch.cuda.set_device(d.local_rank)
    return torch.device("cuda", d.local_rank)


def ranks_in_sync(model: nn.Module, d: Dist) -> bool:
    """Under DDP, whether every rank ends with the same weights (a float64 checksum per rank).

    Args:
        model: the trained model (each rank's).
        d: the run's processes."""
    if d.world == 1:
        return True
    with torch.no_grad():
        flat = torch.cat([p.detach().double().flatten() for p in model.parameters()])
        mine = torch.stack([flat.sum(), (flat * torch.arange(1, len(flat) + 1, dtype=torch.float64,
                                                                   device=flat.device)).sum()])
    sums = [torch.zeros_like(mine) for _ in range(d.world)]
    dist.all_gather(sums, mine)
    return all(torch.equal(sums[0], s) for s in sums[1:])


def finish(d: Dist) -> None:
    """End a multi-process run: wait for every rank, then close the process group (one process: nothing).

    Args:
        d: the run's processes."""
    if d.world > 1 and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def workers_for(workers: int | None, device: torch.device, world: int = 1) -> int:
    """The data-loading processes of a run: as given; by default none on the CPU (the model's threads need the
    cores) and on CUDA each process's share of the cores, at most 8 (timm's default: the host decodes and
    augments while the GPU computes).

    Args:
        workers: --workers, or None for the default.
        device: this process's device.
        world: the processes of the run (they share the host's cores)."""
    if workers is not None:
        return workers
    if device.type != "cuda":
        return 0
    return max(1, min(8, cpu_count() // max(world, 1) - 1))
