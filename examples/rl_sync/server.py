"""The serving job of the RL weight sync (examples/rl_sync/common.py): 4 ranks, two replicas of
tp=2. Every sync writes its shards of every weight in place; it checks every element against the
weights it expects (it replays the trainer's seeded steps) and prints what it checked.

  python3 -m torch.distributed.run --standalone --nproc_per_node 4 --redirects 2 --tee 2 \\
      examples/rl_sync/server.py --store 127.0.0.1:29600
"""
from common import Job, check_serving, serving_tiles

with Job("server") as job:
    # This rank's serving tiles, allocated from the layout alone and written in place by every sync.
    serving = serving_tiles(job.batch, [job.rank])
    for step in range(job.args.steps):
        job.step()  # the weights the trainer has after this step
        job.resharder.run({}, serving)
        checked = check_serving(job.batch, job.params, serving, step)
        print(f"server rank {job.rank} step {step}: {len(serving)} weights, {checked} elements "
              f"checked bit for bit")
