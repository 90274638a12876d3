"""The trainer job of the RL weight sync (examples/rl_sync/common.py): 4 ranks, tp=2 x dp=2. After
every optimizer step its shards of every weight go to both serving replicas in one run of the
joint plan. docs/python.md gives the two commands.

  python3 -m torch.distributed.run --standalone --nproc_per_node 4 --redirects 2 --tee 2 \\
      examples/rl_sync/trainer.py --store 127.0.0.1:29600
"""
import meshcast as mc

from common import Job

with Job("trainer") as job:
    for step in range(job.args.steps):
        loss = job.step()
        # This rank's shards only: the trainer never builds another rank's tiles.
        shards = {name: mc.shard(job.params[name].detach(), src, devices=[job.rank])
                  for name, (_, _, src, _) in job.batch.tensors.items()}
        job.resharder.run(shards)
        if job.rank == 0:
            print(f"trainer step {step}: loss {loss:.4f}, {len(shards)} weights sent")
