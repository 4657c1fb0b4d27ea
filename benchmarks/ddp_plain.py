"""The reference for bench_scale.py: what a hand-written torchrun DDP script does, nothing more.

torchrun --nproc-per-node 2 ddp_plain.py --model resnet20 --batch 32 --steps 30 --out r.json
"""

from __future__ import annotations

import argparse
import json

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from dlperf.models import create_model
from dlperf.timing import Timer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="resnet20")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DistributedDataParallel(create_model(args.model))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(args.batch, 3, 32, 32, generator=g)
    y = torch.randint(10, (args.batch,), generator=g)
    timer = Timer(torch.device("cpu"))
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            dist.barrier()
            timer.start()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    dist.barrier()
    wall = timer.stop()
    if rank == 0:
        with open(args.out, "w") as f:
            json.dump({"wall_s": wall, "steps": args.steps, "world": dist.get_world_size()}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
