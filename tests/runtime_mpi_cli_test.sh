#!/usr/bin/env bash
# `meshcast run` and `meshcast bench` with --backend mpi under mpirun, end to end: one report from
# rank 0, every element verified, and a wrong rank count as one clear error with no hang.
# Usage: runtime_mpi_cli_test.sh path/to/meshcast
set -u
MESHCAST=$1
MPIRUN=(timeout 120 mpirun --oversubscribe)
[[ $(id -u) -eq 0 ]] && MPIRUN+=(--allow-run-as-root)
failures=0
passes=0

# check NAME EXPECT(0|nonzero|N) PATTERN COUNT -- command args...: PATTERN on COUNT lines (N+: at
# least N, where mpirun may stop the other ranks before they print)
check() {
  local name=$1 want=$2 pattern=$3 count=$4
  shift 5
  local out rc lines
  out=$("$@" 2>&1)
  rc=$?
  lines=$(grep -cE -- "$pattern" <<<"$out")
  if [[ $want == 0 && $rc -ne 0 ]] || [[ $want != 0 && ($rc -eq 0 || $rc -eq 124) ]] ||
    [[ $want =~ ^[1-9][0-9]*$ && $rc -ne $want ]]; then
    echo "FAIL $name: exit $rc, expected $want"; echo "$out" | head -20; failures=$((failures + 1))
  elif [[ $count == *+ && $lines -lt ${count%+} ]] || [[ $count != *+ && $lines -ne $count ]]; then
    echo "FAIL $name: /$pattern/ on $lines lines, expected $count"; echo "$out" | head -20
    failures=$((failures + 1))
  else
    passes=$((passes + 1))
  fi
}

CASE7=(--paper-case 7 --scale 256)  # 3 hosts x 4 devices: 12 ranks
check wrong-rank-count nonzero "has 12 devices \(3 hosts x 4 per host\), but MPI started 5 ranks" 1 -- \
  "${MPIRUN[@]}" -np 5 "$MESHCAST" run --backend mpi "${CASE7[@]}"
check run-verify 0 "checked, 0 wrong" 1 -- \
  "${MPIRUN[@]}" -np 12 "$MESHCAST" run --backend mpi "${CASE7[@]}" --verify --iters 2
check run-json 0 '"backend":"mpi".*"verified":true' 1 -- \
  "${MPIRUN[@]}" -np 12 "$MESHCAST" run --backend mpi "${CASE7[@]}" --verify --json --strategy send_recv
check run-mpi-bcast 0 "MPI_Bcast broadcasts" 1 -- \
  "${MPIRUN[@]}" -np 12 "$MESHCAST" run --backend mpi --mpi-bcast "${CASE7[@]}" --verify --iters 1
check bad-option-on-every-rank nonzero "bad strategy 'nope'" 1 -- \
  "${MPIRUN[@]}" -np 2 "$MESHCAST" run --backend mpi --shape 4 --src-mesh 2 --src-spec S0 --dst-spec R --strategy nope
check bench-mpi-verify 0 "^7 .*broadcast/order" 1 -- \
  "${MPIRUN[@]}" -np 12 "$MESHCAST" bench --backend mpi --cases 7 --bytes 65536 --iters 1 --verify
# The soak of docs/reliability.md, short: 30 random cases x 5 strategies on 8 ranks, verified.
check bench-random-soak-mpi 0 "^verify: [0-9]+ destination elements checked in 150 rows, 0 wrong$" 1 -- \
  "${MPIRUN[@]}" -np 8 "$MESHCAST" bench --backend mpi --suite random --count 30 --seed 1 --verify --bytes 16384 --iters 1 --warmup 0
# With a cluster document: its link figures for planning and the prediction; one row per
# strategy, each with the sim and meas/sim columns, printed once.
LINKS=$(mktemp)
trap 'rm -f "$LINKS"' EXIT
echo '{"nic_gbps": 0.3, "dev_gbps": 4, "latency_us": 200}' >"$LINKS"
check bench-mpi-cluster 0 "^7 .* [0-9.]+ (s|ms|µs) +[0-9]+\.[0-9]{3}$" 5 -- \
  "${MPIRUN[@]}" -np 12 "$MESHCAST" bench --backend mpi --cases 7 --bytes 65536 --iters 1 --verify --cluster "$LINKS"
# meshcast pipeline --run --backend mpi: one rank per device, every method's gradients verified,
# one report; a wrong rank count is one clear error on every rank and no hang.
CHAIN=$(mktemp)
trap 'rm -f "$LINKS" "$CHAIN"' EXIT
echo '{"cluster": {"hosts": 3, "devices_per_host": 2}, "microbatches": 4,
  "stages": [{"mesh": "2", "first_host": 0, "forward_s": 0.002}, {"mesh": "2", "first_host": 1, "forward_s": 0.002},
             {"mesh": "2", "first_host": 2, "forward_s": 0.002}],
  "edges": [{"from": 0, "to": 1, "tensors": [{"shape": [8, 16], "src_spec": "S0R", "dst_spec": "RR"}]},
            {"from": 1, "to": 2, "tensors": [{"shape": [8, 16], "src_spec": "RR", "dst_spec": "S0R"}]}]}' >"$CHAIN"
# Interleaved-1F1B, 3 stages x 2 chunks (model stage 3c+d is chunk c of stage d) and a skip 0->4.
INTERLEAVED=$(mktemp)
trap 'rm -f "$LINKS" "$CHAIN" "$INTERLEAVED"' EXIT
echo '{"cluster": {"hosts": 3, "devices_per_host": 2}, "microbatches": 6,
  "stages": [{"mesh": "2", "first_host": 0, "forward_s": 0.002}, {"mesh": "2", "first_host": 1, "forward_s": 0.002},
             {"mesh": "2", "first_host": 2, "forward_s": 0.002}, {"mesh": "2", "first_host": 0, "forward_s": 0.002},
             {"mesh": "2", "first_host": 1, "forward_s": 0.002}, {"mesh": "2", "first_host": 2, "forward_s": 0.002}],
  "edges": [{"from": 0, "to": 1, "tensors": [{"shape": [8, 16], "src_spec": "S0R", "dst_spec": "RR"}]},
            {"from": 1, "to": 2, "tensors": [{"shape": [8, 16], "src_spec": "RR", "dst_spec": "S0R"}]},
            {"from": 2, "to": 3, "tensors": [{"shape": [8, 16], "src_spec": "S0R", "dst_spec": "S0R"}]},
            {"from": 3, "to": 4, "tensors": [{"shape": [8, 16], "src_spec": "S0R", "dst_spec": "RR"}]},
            {"from": 4, "to": 5, "tensors": [{"shape": [8, 16], "src_spec": "RR", "dst_spec": "S0R"}]},
            {"from": 0, "to": 4, "tensors": [{"shape": [8, 16], "src_spec": "S0R", "dst_spec": "RR"}]}]}' >"$INTERLEAVED"
check pipeline-mpi-interleaved-verify 0 "interleaved-1f1b .* yes$" 3 -- \
  "${MPIRUN[@]}" -np 6 "$MESHCAST" pipeline --config "$INTERLEAVED" --chunks 2 --run --backend mpi --compute real --verify
check pipeline-mpi-interleaved-verify-no-overlap 0 "interleaved-1f1b +[a-z_]+ +no .* yes$" 3 -- \
  "${MPIRUN[@]}" -np 6 "$MESHCAST" pipeline --config "$INTERLEAVED" --chunks 2 --run --backend mpi --compute real --verify --no-overlap
check pipeline-mpi-verify 0 " yes$" 8 -- \
  "${MPIRUN[@]}" -np 6 "$MESHCAST" pipeline --config "$CHAIN" --run --backend mpi --compute real --verify
check pipeline-mpi-verify-no-overlap 0 '"verified":true' 1 -- \
  "${MPIRUN[@]}" -np 6 "$MESHCAST" pipeline --config "$CHAIN" --run --backend mpi --compute real --verify --no-overlap --format json
check pipeline-mpi-timed 0 "^eager-1f1b +eager-1f1b" 1 -- \
  "${MPIRUN[@]}" -np 6 "$MESHCAST" pipeline --config "$CHAIN" --run --backend mpi
check pipeline-mpi-wrong-rank-count 2 "has 6 devices \(3 hosts x 2 per host\), but MPI started 4 ranks" 4 -- \
  "${MPIRUN[@]}" -np 4 "$MESHCAST" pipeline --config "$CHAIN" --run --backend mpi
# A one-stage pipeline (no edges, no channel): each rank plays its device of the stage; it
# crashed (exit 139).
ONE_STAGE=$(mktemp)
trap 'rm -f "$LINKS" "$CHAIN" "$INTERLEAVED" "$ONE_STAGE"' EXIT
echo '{"cluster": {"hosts": 1, "devices_per_host": 2}, "microbatches": 2,
  "stages": [{"mesh": "2", "first_host": 0, "forward_s": 0.001}], "edges": []}' >"$ONE_STAGE"
check pipeline-mpi-one-stage 0 "^eager-1f1b +eager-1f1b" 1 -- \
  "${MPIRUN[@]}" -np 2 "$MESHCAST" pipeline --config "$ONE_STAGE" --run --backend mpi
# A schedule that deadlocks and meshes that do not fit --cluster: one clear error on every rank
# (mpirun stops the others once one has exited, so some may not print it), exit 2 (mpirun passes
# on the ranks' status), before anything moves.
DEADLOCK=$(mktemp)
SMALL=$(mktemp)
trap 'rm -f "$LINKS" "$CHAIN" "$INTERLEAVED" "$ONE_STAGE" "$DEADLOCK" "$SMALL"' EXIT
printf 'stage 0: F0 F1 B0 B1\nstage 1: F0 B0 F1 B1\nstage 2: F0 F1 B0 B1\n' >"$DEADLOCK"
check pipeline-mpi-deadlock 2 "deadlock: .*stage 1 at step 1 \(B0\) waits for the gradient" 1+ -- \
  "${MPIRUN[@]}" -np 6 "$MESHCAST" pipeline --config "$CHAIN" --run --backend mpi -m 2 --schedule "$DEADLOCK"
echo '{"hosts": 2, "devices_per_host": 2}' >"$SMALL"
check pipeline-mpi-no-fit 2 "stage 2 does not fit the cluster of" 1+ -- \
  "${MPIRUN[@]}" -np 4 "$MESHCAST" pipeline --config "$CHAIN" --run --backend mpi --cluster "$SMALL"

# A batch of three tensors (two dtypes, meshes differing per tensor) on 6 ranks: every element
# of every tensor verified.
BATCH="$(dirname "$0")/data/batch-3-tensors.json"
check batch-run-verify 0 "checked, 0 wrong" 1 -- \
  "${MPIRUN[@]}" -np 6 "$MESHCAST" run --backend mpi --batch "$BATCH" --verify --iters 2

# The four weight-sync methods (buckets, relays that keep part of what they receive) on 8 ranks,
# every element checked: a tiny llama, tp=2,pp=2 -> tp=2,replicas=2.
TINY=$(mktemp -d)
"$MESHCAST" model --hidden 64 --layers 4 --heads 4 --ffn 128 --vocab 100 --train tp=2,pp=2 \
  --serve tp=2,replicas=2 -o "$TINY/tiny.json" >/dev/null
check bench-batch-mpi 0 "^ +(joint|per_tensor|full_broadcast|gather_broadcast) " 4 -- \
  "${MPIRUN[@]}" -np 8 "$MESHCAST" bench --batch "$TINY/tiny.json" --backend mpi --verify --iters 1 --warmup 0
# Fused serving buffers on 5 ranks (tp=2 -> tp=3, uneven): q, k, v written into qkv_proj and
# gate, up into gate_up_proj; every element and every byte outside the regions checked.
"$MESHCAST" model --hidden 40 --layers 2 --heads 5 --ffn 64 --vocab 100 --train tp=2 \
  --serve tp=3 --devices-per-host 1 -o "$TINY/fused.json" >/dev/null
check fused-run-mpi 0 "0 wrong; [1-9][0-9]* bytes of bound buffers outside the tiles checked, 0 changed" 1 -- \
  "${MPIRUN[@]}" -np 5 "$MESHCAST" run --backend mpi --batch "$TINY/fused.json" --verify --iters 2
rm -rf "$TINY"

echo "$passes passed, $failures failed"
[[ $failures -eq 0 ]]
