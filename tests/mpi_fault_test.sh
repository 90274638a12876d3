#!/usr/bin/env bash
# Faults under mpirun (issue 15): a rank killed mid-run and a rank that hangs mid-run (a single
# tensor, a batch, a bench and a pipeline) end the job in bounded time with a message naming what failed and a
# non-zero mpirun status; no rank is left waiting. A launch whose machines do not match the
# plan's hosts is refused before any byte moves. (Ranks given different plans: runtime_mpi_test;
# Python's Resharder: python_mpi_test.)
# Usage: mpi_fault_test.sh path/to/meshcast
set -u
MESHCAST=$(realpath "$1")
DATA=$(realpath "$(dirname "$0")/data")
source "$(dirname "$0")/cli_check.sh"
passes=0
failures=0
MPIRUN=(mpirun --oversubscribe)
[[ $(id -u) -eq 0 ]] && MPIRUN+=(--allow-run-as-root)
FOREVER=(--iters 100000000 --warmup 0)
# 4 ranks (2 hosts x 2), a 4 MiB tensor, run without end: the fault comes while bytes move.
TENSOR=(run --backend mpi --shape 1048576 --src-mesh 2 --src-spec S0 --dst-spec R "${FOREVER[@]}")
# 6 ranks (3 hosts x 2), the three tensors of a batch file.
BATCH=(run --backend mpi --batch "$DATA/batch-3-tensors.json" "${FOREVER[@]}")

# fault_run NAME RANKS SIGNAL PATTERN ARGS...: starts `mpirun -np RANKS meshcast ARGS`, signals
# one rank after 6 s (ranks of a loaded machine may still be starting MPI, where no watchdog
# runs yet), expects mpirun to end non-zero within 60 s with PATTERN in its output.
fault_run() {
  local name=$1 np=$2 signal=$3 pattern=$4 out rc victim ranks job
  shift 4
  out=$(mktemp)
  timeout 60 "${MPIRUN[@]}" -np "$np" "$MESHCAST" "$@" >"$out" 2>&1 &
  job=$!
  sleep 6
  # The ranks are the children of this job's mpirun (the child of timeout).
  ranks=$(pgrep -P "$(pgrep -P "$job" | head -1)" | tr '\n' ' ')
  victim=$(echo "$ranks" | awk '{print $2}')
  if [[ -z $victim ]]; then
    echo "FAIL $name: no rank found to signal"; cat "$out"; failures=$((failures + 1))
    kill "$job" 2>/dev/null
    wait "$job"
  else
    kill "-$signal" "$victim"
    wait "$job"
    rc=$?
    if [[ $rc -eq 0 || $rc -eq 124 ]]; then
      echo "FAIL $name: mpirun exit $rc (124: still running after 60 s)"; tail -20 "$out"
      failures=$((failures + 1))
    elif ! grep -qE -- "$pattern" "$out"; then
      echo "FAIL $name: output lacks /$pattern/"; tail -20 "$out"; failures=$((failures + 1))
    else
      passes=$((passes + 1))
    fi
  fi
  # Whatever is left of this job's ranks (a stopped rank, on failure) goes.
  for pid in $ranks; do kill -KILL "$pid" 2>/dev/null; done
  rm -f "$out"
}

# Killed: mpirun sees the rank die and stops the others (whatever the timeout).
fault_run rank-killed 4 KILL "signal 9|Killed" "${TENSOR[@]}"
# Stopped: alive but silent, only the others' timeout ends them.
fault_run rank-hung 4 STOP "run [0-9]+ of 100000000 did not finish within the timeout of 5 s" \
  "${TENSOR[@]}" --timeout 5
fault_run rank-hung-batch 6 STOP "run [0-9]+ of 100000000 did not finish within the timeout of 5 s" \
  "${BATCH[@]}" --timeout 5
fault_run bench-rank-hung 12 STOP "did not finish within the timeout of 5 s" \
  bench --backend mpi --cases 7 --bytes 4194304 --iters 100000000 --timeout 5
# The pipeline runtime: a rank stopped mid-iteration; the others' watchdog ends the job.
CHAIN=$(mktemp)
echo '{"cluster": {"hosts": 3, "devices_per_host": 2}, "microbatches": 4,
  "stages": [{"mesh": "2", "first_host": 0, "forward_s": 0.005}, {"mesh": "2", "first_host": 1, "forward_s": 0.005},
             {"mesh": "2", "first_host": 2, "forward_s": 0.005}],
  "edges": [{"from": 0, "to": 1, "tensors": [{"shape": [8, 16], "src_spec": "S0R", "dst_spec": "RR"}]},
            {"from": 1, "to": 2, "tensors": [{"shape": [8, 16], "src_spec": "RR", "dst_spec": "S0R"}]}]}' >"$CHAIN"
fault_run pipeline-rank-hung 6 STOP "pipeline iteration [0-9]+ of 1001 did not finish within the timeout of 5 s" \
  pipeline --config "$CHAIN" --run --backend mpi --repeats 1000 --timeout 5
rm -f "$CHAIN"

# A cluster host whose ranks run on two machines: ranks 2,3 get another host name (a UTS
# namespace; root only). Two hosts of 2 devices match the launch; one host of 4 does not.
if [[ $(id -u) -ne 0 ]] || ! unshare --uts true 2>/dev/null; then
  echo "SKIPPED machines-match-hosts: needs root for a UTS namespace (unshare --uts)"
else
  OTHER=(unshare --uts sh -c 'hostname meshcast-other-machine && exec "$0" "$@"' "$MESHCAST")
  LAYOUT=(--shape 64 --src-mesh 2 --src-spec S0 --dst-spec R --iters 1 --verify)
  check machines-match-hosts 0 "checked, 0 wrong" -- timeout 60 "${MPIRUN[@]}" \
    -np 2 "$MESHCAST" run --backend mpi "${LAYOUT[@]}" : -np 2 "${OTHER[@]}" run --backend mpi "${LAYOUT[@]}"
  check host-spans-machines 2 "puts devices 0\.\.3 on host 0, but MPI started rank 0 on machine '[^']+' and rank 2 on 'meshcast-other-machine'" -- \
    timeout 60 "${MPIRUN[@]}" -np 2 "$MESHCAST" run --backend mpi "${LAYOUT[@]}" --devices-per-host 4 --dst-host-offset 0 \
    : -np 2 "${OTHER[@]}" run --backend mpi "${LAYOUT[@]}" --devices-per-host 4 --dst-host-offset 0
fi

echo "$passes passed, $failures failed"
[[ $failures -eq 0 ]]
