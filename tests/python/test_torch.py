"""The torch backend on a gloo group of 4 and 8 processes: tests/python/torch_ranks.py and the
examples under torchrun as users launch them, and faults (tests/python/torch_faults.py) under
plain processes, which torchrun would stop as soon as one died."""
import os
import pathlib
import socket
import subprocess
import sys

import pytest
import torch

HERE = pathlib.Path(__file__).parent
EXAMPLES = HERE.parent.parent / "examples"


def torchrun(ranks, *args):
    # Debian's torch 1.13 on Python 3.11 needs --redirects and --tee (0 parses as None).
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
               str(ranks), "--redirects", "2", "--tee", "2"]
    return command + [str(a) for a in args]


def run(command, timeout=300):
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    return done.returncode, done.stdout + done.stderr


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("ranks", [4, 8])
def test_random_batches_under_torchrun(ranks):
    code, output = run(torchrun(ranks, HERE / "torch_ranks.py", ranks))
    assert code == 0, output
    assert f"{ranks} ranks:" in output and "destination elements right" in output, output


def test_weight_sync_example_under_torchrun():
    code, output = run(torchrun(8, EXAMPLES / "weight_sync.py", "--backend", "torch"))
    assert code == 0, output
    assert output.count("elements checked bit for bit") == 3, output


def test_rl_sync_trainer_and_server_as_two_jobs():
    store = f"127.0.0.1:{free_port()}"
    jobs = [subprocess.Popen(torchrun(4, EXAMPLES / "rl_sync" / f"{role}.py", "--store", store),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for role in ("trainer", "server")]
    outputs = [job.communicate(timeout=300)[0] for job in jobs]
    assert [job.returncode for job in jobs] == [0, 0], outputs
    assert outputs[0].count("weights sent") == 3, outputs[0]
    # Every serving rank checked every step.
    assert outputs[1].count("elements checked bit for bit") == 4 * 3, outputs[1]


def group_of_processes(ranks, *args):
    """`ranks` processes of one gloo group, env:// variables set as a launcher sets them."""
    port = free_port()
    processes = []
    for rank in range(ranks):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(ranks), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port))
        processes.append(subprocess.Popen([sys.executable, str(HERE / "torch_faults.py"),
                                           *map(str, args)], env=env, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True))
    return [(p.communicate(timeout=300)[0], p.returncode) for p in processes]


def test_wrong_world_size_and_different_plans_raise_on_every_rank():
    for rank, (output, code) in enumerate(group_of_processes(4, "refusals")):
        assert code == 0, output
        assert "wrong world size refused: the plan's cluster has 8 devices, but the group has " \
               "4 ranks" in output, output
        assert "different plans refused: the 4 ranks were given different plans" in output, output
        assert "the same plan ran after the refusals" in output, output


def test_a_killed_peer_raises_on_every_other_rank_within_the_timeout():
    results = group_of_processes(4, "killed", 5)
    for rank, (output, code) in enumerate(results):
        if rank == 1:
            assert code == -9, output  # SIGKILL
            continue
        assert code == 0, output
        assert f"rank {rank}: run 3 raised" in output or f"rank {rank}: run 4 raised" in output, \
            output
        assert "raised RuntimeError" in output or "raised TimeoutError" in output, output


def small_plan():
    import meshcast as mc
    return mc.plan(shape=(4,), dtype="float32", src=mc.Layout(mc.Mesh([2], [0, 1]), "S0"),
                   dst=mc.Layout(mc.Mesh([2], [1, 0]), "S0"),
                   cluster=mc.Cluster(hosts=1, devices_per_host=2))


def test_group_and_ranks_only_with_the_torch_backend():
    import meshcast as mc
    with pytest.raises(ValueError, match="group, ranks: given for backend 'local', expected them "
                                         "only with backend='torch'"):
        mc.Resharder(small_plan(), ranks=[0, 1])


def test_the_torch_backend_needs_an_initialized_group():
    import meshcast as mc
    with pytest.raises(RuntimeError, match="torch.distributed is not initialized"):
        mc.Resharder(small_plan(), backend="torch")


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="NCCL needs CUDA, and torch.cuda.is_available() is False here")
def test_nccl_group_on_cuda_tensors():
    code, output = run(torchrun(2, HERE / "torch_ranks.py", 2, "nccl"))
    assert code == 0, output
