#!/usr/bin/python3
"""GPT-2 124M trained data-parallel in PyTorch on CPU: the peer bench_zero.sh compares memtrain's ZeRO
stages with. The model, data reading, precision and step are torch_gpt2.py's.

Launched by mpirun, one process per rank (rank and world size from OMPI_COMM_WORLD_RANK and
OMPI_COMM_WORLD_SIZE), so that the ranks are placed like memtrain's; they meet through a file and
exchange gradients over a gloo process group. Modes:
  ddp    DistributedDataParallel and AdamW: every rank holds all states (peer of ZeRO stage 0)
  zero1  DistributedDataParallel and ZeroRedundancyOptimizer around AdamW: each rank keeps the AdamW
         moments of its share of the parameters and broadcasts that share after the step (peer of stage 1)
DDP's gradients are views into its all-reduce buckets (gradient_as_bucket_view), PyTorch's documented
way to avoid a second copy of the gradients. Rank r trains on every world-th batch of the shard read in
order, as `memtrain train --no-shuffle` does. Rank 0 prints one JSON object: rank 0's step times, the
losses averaged over the ranks, and each rank's peak RSS and model-state bytes per parameter.
"""
import argparse
import itertools
import json
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel

import torch_gpt2


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    torch_gpt2.add_arguments(ap)
    ap.add_argument("--mode", choices=["ddp", "zero1"], required=True)
    ap.add_argument("--rendezvous", required=True, help="a file the ranks meet through; must not exist yet")
    args = ap.parse_args()
    rank, world = int(os.environ["OMPI_COMM_WORLD_RANK"]), int(os.environ["OMPI_COMM_WORLD_SIZE"])
    dist.init_process_group("gloo", init_method="file://" + os.path.abspath(args.rendezvous), rank=rank,
                            world_size=world)

    model = torch_gpt2.seeded_model(torch_gpt2.gpt2, args)
    ddp = DistributedDataParallel(model, gradient_as_bucket_view=True)
    if args.mode == "zero1":
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW,
                                      **torch_gpt2.adamw_settings(args))
    else:
        opt = torch.optim.AdamW(model.parameters(), **torch_gpt2.adamw_settings(args))
    data = torch_gpt2.batches(torch_gpt2.shard_tokens(args.shard), args.batch, args.seq)
    step_ms, losses, _ = torch_gpt2.train(ddp, opt, itertools.islice(data, rank, None, world), args)

    mean_losses = torch.tensor(losses, dtype=torch.float64)
    dist.all_reduce(mean_losses)
    ranks = [None] * world
    dist.all_gather_object(ranks, {"peak_rss_bytes": torch_gpt2.peak_rss_bytes(),
                                   "model_state_bytes_per_param": torch_gpt2.model_state_bytes_per_param(model, opt)})
    if rank == 0:
        print(json.dumps({
            **torch_gpt2.run_settings(args),
            "mode": args.mode,
            "world": world,
            "step_ms": step_ms,
            "losses": (mean_losses / world).tolist(),
            "ranks": ranks,
        }))
    # torch 1.13 can deadlock tearing down DDP's gloo group (the joining thread holds the GIL that the group's
    # worker thread waits for to free a tensor), and a rank hung that way once: leave without tearing down.
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
