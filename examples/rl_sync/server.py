"""The serving job of the RL weight sync (examples/rl_sync/common.py): 4 ranks, two replicas of
tp=2. Every sync writes its shards of every weight in place; it checks every element against the
weights it expects (it replays the trainer's seeded steps) and prints what it checked.

  python3 -m torch.distributed.run --standalone --nproc_per_node 4 --redirects 2 --tee 2 \\
      examples/rl_sync/server.py --store 127.0.0.1:29600
"""
import torch

import meshcast as mc

from common import arguments, join, model_and_plan, train_step, training

args = arguments("server")
rank = join("server", args)
model, batch, plan = model_and_plan()
optimizer, tokens = training(model)
params = dict(model.named_parameters())
resharder = mc.Resharder(plan, backend="torch", timeout=args.timeout)
# This rank's serving shards, written in place by every sync.
serving = {name: {d: torch.empty(t.shape) for d, t in mc.shard(params[name].detach(), dst).items()
                  if d == rank}
           for name, (_, _, _, dst) in batch.tensors.items()}
for step in range(args.steps):
    train_step(model, optimizer, tokens)  # the weights the trainer has after this step
    resharder.run({}, serving)
    checked = 0
    for name, (_, _, _, dst) in batch.tensors.items():
        want = mc.shard(params[name].detach(), dst)
        for d, t in serving[name].items():
            assert torch.equal(t, want[d]), f"step {step}: {name} on device {d} differs"
            checked += t.numel()
    print(f"server rank {rank} step {step}: {len(serving)} weights, {checked} elements checked "
          f"bit for bit")
