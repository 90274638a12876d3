"""The mpi backend under mpirun with 4 and 8 ranks (tests/python/mpi_ranks.py)."""
import os
import pathlib
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).parent


def mpirun(ranks, *args):
    command = ["mpirun", "--oversubscribe"]
    if os.getuid() == 0:
        command.append("--allow-run-as-root")
    return subprocess.run(command + ["-np", str(ranks), sys.executable, *args],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("ranks", [4, 8])
def test_random_layouts_under_mpirun(ranks):
    done = mpirun(ranks, str(HERE / "mpi_ranks.py"), str(ranks))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{ranks} ranks:" in done.stdout and "destination elements right" in done.stdout


def test_weight_sync_example_one_rank_per_device():
    done = mpirun(8, str(HERE.parent.parent / "examples" / "weight_sync.py"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("elements checked bit for bit") == 3, done.stdout


def test_a_stopped_rank_raises_timeout_error_on_another_rank():
    # Rank 1 stops itself after two runs; the others' third wait() raises TimeoutError (timeout=3)
    # instead of ending the process, and the script ends the job with comm.Abort.
    done = mpirun(4, str(HERE / "mpi_stuck_rank.py"))
    assert done.returncode != 0, done.stdout + done.stderr
    assert "TimeoutError: run 3 did not finish within the timeout of 3 s" in done.stdout, \
        done.stdout + done.stderr


def test_outputs_are_the_kind_asked_for_on_every_rank_whatever_it_holds():
    done = mpirun(4, str(HERE / "mpi_outputs.py"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "bfloat16 numpy: ValueError (the tensor is bfloat16, which numpy has no dtype for" \
        in done.stdout and "on ranks 0,1,2,3" in done.stdout, done.stdout
    assert "bfloat16 torch: nothing on ranks 0,1; torch.Tensor on ranks 2,3" in done.stdout
    assert "float32 numpy: nothing on ranks 0,1; numpy.ndarray on ranks 2,3" in done.stdout
    assert "float32 torch: nothing on ranks 0,1; torch.Tensor on ranks 2,3" in done.stdout
