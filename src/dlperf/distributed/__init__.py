"""Distributed training on torch.distributed: torchrun launching, the DDP worker, scaling
studies, the all-reduce benchmark and job files."""

CHUNKS = 5  # timed steps alternate between the point and its compute-only copy in chunks


def chunk_sizes(steps: int) -> list[int]:
    """The timed steps cut into CHUNKS consecutive chunks (fewer with fewer steps), the first
    ones a step longer when they do not divide evenly: how every framework's worker alternates
    a point's steps with its compute-only copy's, and how the study reads them back. Here, in
    the package, because the TensorFlow worker must not import torch."""
    chunks = max(1, min(CHUNKS, steps))
    return [steps // chunks + (i < steps % chunks) for i in range(chunks)]
