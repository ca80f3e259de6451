"""A training script written for torchrun, unchanged: reads its arguments and the torchrun environment."""

import argparse
import os

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, required=True)
parser.add_argument("--tag", required=True)
args = parser.parse_args()
dist.init_process_group("gloo")
total = torch.tensor([float(args.epochs)])
dist.all_reduce(total)
print(
    f"script rank {os.environ['RANK']}/{os.environ['WORLD_SIZE']} as {__name__}: total {total.item()} tag {args.tag}",
    flush=True,
)
dist.destroy_process_group()
