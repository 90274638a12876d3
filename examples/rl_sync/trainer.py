"""The trainer job of the RL weight sync (examples/rl_sync/common.py): 4 ranks, tp=2 x dp=2. After
every optimizer step its shards of every weight go to both serving replicas in one run of the
joint plan. docs/python.md gives the two commands.

  python3 -m torch.distributed.run --standalone --nproc_per_node 4 --redirects 2 --tee 2 \\
      examples/rl_sync/trainer.py --store 127.0.0.1:29600
"""
import meshcast as mc

from common import arguments, join, model_and_plan, train_step, training

args = arguments("trainer")
rank = join("trainer", args)
model, batch, plan = model_and_plan()
optimizer, tokens = training(model)
params = dict(model.named_parameters())
resharder = mc.Resharder(plan, backend="torch", timeout=args.timeout)
for step in range(args.steps):
    loss = train_step(model, optimizer, tokens)
    shards = {name: {d: t for d, t in mc.shard(params[name].detach(), src).items() if d == rank}
              for name, (_, _, src, _) in batch.tensors.items()}
    resharder.run(shards)
    if rank == 0:
        print(f"trainer step {step}: loss {loss:.4f}, {len(shards)} weights sent")
