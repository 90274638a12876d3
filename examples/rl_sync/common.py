"""What the trainer and the serving job of the RL weight sync share: the model (examples/
weight_sync.py's tiny llama), the joint group both jobs join, and the one plan both compile.

The joint group has 8 ranks: the trainer's 4 processes are ranks 0-3 (devices 0-3, tp=2 x dp=2),
the serving job's 4 processes ranks 4-7 (devices 4-7, two replicas of tp=2). Each job is started
by its own torchrun; the trainer's rank 0 hosts the torch.distributed.TCPStore at the address given
on both command lines, and every process joins the gloo group through it.
"""
import argparse
import os
import pathlib
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from weight_sync import (CONFIG, SERVE, TRAIN, Llama, check_serving, serving_tiles,  # noqa: E402,F401
                         train_step)

import meshcast as mc  # noqa: E402

JOB_RANKS = 4      # processes per job
STEPS = 3


def arguments(role):
    parser = argparse.ArgumentParser(description=f"RL weight sync: the {role} job")
    parser.add_argument("--store", required=True, metavar="HOST:PORT",
                        help="the TCPStore both jobs join (the trainer's rank 0 hosts it)")
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds joining, compiling or one sync may take before it raises")
    return parser.parse_args()


def join(role, args):
    """This process's rank in the joint group (the trainer's first): torchrun's RANK in its job,
    offset by the trainer's ranks for the serving job."""
    job_rank = int(os.environ["RANK"])
    if int(os.environ["WORLD_SIZE"]) != JOB_RANKS:
        raise SystemExit(f"{role}: run with --nproc_per_node {JOB_RANKS}, not "
                         f"{os.environ['WORLD_SIZE']}")
    rank = job_rank + (0 if role == "trainer" else JOB_RANKS)
    host, port = args.store.rsplit(":", 1)
    store = dist.TCPStore(host, int(port), 2 * JOB_RANKS, is_master=rank == 0,
                          timeout=timedelta(seconds=args.timeout))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=2 * JOB_RANKS,
                            timeout=timedelta(seconds=args.timeout))
    return rank


def model_and_plan():
    """The model every process trains the same way (seeded, one thread: bit for bit the same
    weights everywhere), and the joint plan of all its weights, trainer shards -> both replicas."""
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = Llama(CONFIG)
    batch = mc.model_batch(**CONFIG, train=TRAIN, serve=SERVE,
                           cluster=mc.Cluster(hosts=1, devices_per_host=4))
    return model, batch, mc.plan(batch.tensors, cluster=batch.cluster)


def training(model):
    """The optimizer and the tokens of every step, the same in every process."""
    return torch.optim.AdamW(model.parameters(), lr=1e-2), torch.randint(0, CONFIG["vocab"], (4, 16))


class Job:
    """What both jobs set up alike: the arguments, this process's rank in the joint group, the
    model with its optimizer and tokens, the joint plan's batch and the Resharder that plays it.
    Used as a context manager, it drops the Resharder and then the group before the process ends:
    torch 1.13's gloo group left to interpreter shutdown can abort the process."""

    def __init__(self, role):
        self.args = arguments(role)
        self.rank = join(role, self.args)
        self.model, self.batch, plan = model_and_plan()
        self.optimizer, self.tokens = training(self.model)
        self.params = dict(self.model.named_parameters())
        self.resharder = mc.Resharder(plan, backend="torch", timeout=self.args.timeout)

    def step(self):
        """One optimizer step, the same in both jobs; returns the loss."""
        return train_step(self.model, self.optimizer, self.tokens)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        del self.resharder
        dist.destroy_process_group()
        return False
