"""Distributed training on torch.distributed: torchrun launching, the DDP worker, scaling
studies, the all-reduce benchmark and job files."""
