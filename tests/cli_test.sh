#!/usr/bin/env bash
# End-to-end checks of the meshcast command: documents, exit codes and error messages.
# Usage: cli_test.sh path/to/meshcast
set -u
MESHCAST=$1
failures=0
passes=0

source "$(dirname "$0")/cli_check.sh"

LAYOUT=(--shape 1024,1024,512 --dtype int32 --src-mesh 2x4 --src-spec RS0R --dst-mesh 2x4 --dst-spec RRS0)
check tasks-text 0 "unit tasks: 4" -- "$MESHCAST" tasks "${LAYOUT[@]}"
check tasks-json 0 '"meshcast_version"' -- "$MESHCAST" tasks "${LAYOUT[@]}" --json
check tasks-json-devices 0 '"devices":\[8,9,10,11,12,13,14,15\]' -- "$MESHCAST" tasks "${LAYOUT[@]}" --json
check tasks-host-offset 0 '"devices":\[4,5,6,7,8,9,10,11\]' -- "$MESHCAST" tasks "${LAYOUT[@]}" --dst-host-offset 1 --json
check tasks-explicit 0 'unit tasks: 2' -- "$MESHCAST" tasks --shape 8 --src-mesh 2 --src-spec S0 --dst-mesh 2 --dst-spec R --src-devices 0,1 --dst-devices 3,2
check bad-spec 2 "bad sharding spec 'S0Q'" -- "$MESHCAST" tasks --shape 4,4 --src-mesh 2 --src-spec S0Q --dst-spec RR
check spec-dtensor 0 '"spec":"RS1"' -- "$MESHCAST" tasks --shape 8,8 --src-mesh 2x4 --src-spec "Shard(0),Replicate()" --dst-spec "Replicate(),Shard(1)" --json
check spec-dtensor-nested 0 '"spec":"S0/1R"' -- "$MESHCAST" tasks --shape 5,8 --src-mesh 2x2 --src-spec "[Shard(0), Shard(0)]" --dst-spec RR --json
check spec-jax 0 '"spec":"S01R"' -- "$MESHCAST" tasks --shape 8,8 --src-mesh 2x4 --src-spec "P(('dp','tp'),None)" --dst-spec "P(None,tp)" --src-axes dp,tp --json
check spec-jax-dst-axes 0 '"spec":"RS0"' -- "$MESHCAST" tasks --shape 8,8 --src-mesh 2x4 --src-spec S0R --dst-spec "P(None,dp)" --dst-axes dp,tp --json
check spec-jax-bad-name 2 "--dst-spec: .*'pp' \(expected one of dp, tp\)" -- "$MESHCAST" tasks --shape 8,8 --src-mesh 2x4 --src-spec S0R --dst-spec "P(None,pp)" --dst-axes dp,tp
check spec-dtensor-count 2 "--src-spec: .*1 placements, but the mesh has 2 axes" -- "$MESHCAST" tasks --shape 8,8 --src-mesh 2x4 --src-spec "Shard(0)" --dst-spec RR
check axis-twice 2 "mesh axis 0 is used twice" -- "$MESHCAST" tasks --shape 4,4 --src-mesh 2 --src-spec S0S0 --dst-spec RR
check axis-range 2 "uses mesh axis 1, but the mesh has 1 axes" -- "$MESHCAST" tasks --shape 4,4 --src-mesh 2 --src-spec S1R --dst-spec RR
check rank-mismatch 2 "has 3 entries, but the tensor has 2" -- "$MESHCAST" tasks --shape 4,4 --src-mesh 2 --src-spec S0RR --dst-spec RR
check zero-size 2 "size 0 must be positive" -- "$MESHCAST" tasks --shape 4,0 --src-mesh 2 --src-spec S0R --dst-spec RR
check negative-size 2 "bad shape '4,-1'" -- "$MESHCAST" tasks --shape 4,-1 --src-mesh 2 --src-spec S0R --dst-spec RR
check zero-mesh 2 "bad mesh shape '2x0'" -- "$MESHCAST" tasks --shape 4,4 --src-mesh 2x0 --src-spec S0R --dst-spec RR
check device-count 2 "needs 2 devices, the device list has 3" -- "$MESHCAST" tasks --shape 4 --src-mesh 2 --src-spec S0 --dst-spec R --src-devices 0,1,2
check device-repeat 2 "device 1 appears twice" -- "$MESHCAST" tasks --shape 4 --src-mesh 2 --src-spec S0 --dst-spec R --dst-devices 1,1
check not-fit 2 "uses device 9, but the cluster has 2 hosts" -- "$MESHCAST" tasks --shape 4 --src-mesh 2 --src-spec S0 --dst-spec R --dst-devices 9,1 --devices-per-host 4 --hosts 2
check mesh-wider-than-host 2 "puts 4 devices on each host, but hosts have 2" -- "$MESHCAST" tasks --shape 4 --src-mesh 4 --src-spec S0 --dst-spec R --devices-per-host 2
check bad-dtype 2 "bad dtype 'int33'" -- "$MESHCAST" tasks --shape 4 --dtype int33 --src-mesh 2 --src-spec S0 --dst-spec R
check missing-option 2 "missing --dst-spec" -- "$MESHCAST" tasks --shape 4 --src-mesh 2 --src-spec S0
check paper-case 0 "unit tasks: 64" -- "$MESHCAST" tasks --paper-case 4
check bad-paper-case 2 "bad --paper-case 9: expected a number in 1..8" -- "$MESHCAST" tasks --paper-case 9
# plan: text summary, document, loading and checking plan files.
PLAN_DIR=$(mktemp -d)
trap 'rm -rf "$PLAN_DIR"' EXIT
SMALL=(--shape 8 --src-mesh 2 --src-spec S0 --dst-mesh 2 --dst-spec R)
check plan-text 0 "strategy broadcast, balance order: 4 ops \(broadcast 4\)" -- "$MESHCAST" plan --paper-case 7 --scale 16
check plan-ratio 0 "estimate: .*x the lower bound" -- "$MESHCAST" plan --paper-case 7 --scale 16
check plan-host-bytes 0 "host +0: out +1.00 GiB" -- "$MESHCAST" plan --paper-case 7 --scale 16 --strategy send_recv
check plan-json 0 '"lower_bound_s":.*"meshcast_version":.*"kind":"send"' -- "$MESHCAST" plan "${SMALL[@]}" --strategy send_recv --json
"$MESHCAST" plan "${SMALL[@]}" --strategy send_recv --balance none --json >"$PLAN_DIR/p.json"
check plan-check 0 "valid plan, 4 ops" -- "$MESHCAST" plan --check "$PLAN_DIR/p.json"
check plan-load 0 "strategy send_recv, balance none: 4 ops" -- "$MESHCAST" plan --plan "$PLAN_DIR/p.json"
sed 's/"sender":0/"sender":1/' "$PLAN_DIR/p.json" >"$PLAN_DIR/broken.json"
check plan-check-broken 2 "op 0 \(send of task 0\): sender 1 does not hold \[0,4\)" -- "$MESHCAST" plan --check "$PLAN_DIR/broken.json"
check plan-check-missing 2 "cannot read plan file" -- "$MESHCAST" plan --check "$PLAN_DIR/none.json"
check plan-bad-strategy 2 "bad strategy 'teleport': expected one of send_recv, allgather, broadcast" -- "$MESHCAST" plan "${SMALL[@]}" --strategy teleport
check plan-bad-balance 2 "bad balance 'fast': expected one of none, size, order" -- "$MESHCAST" plan "${SMALL[@]}" --balance fast
check plan-bad-chunk 2 "bad --chunk-bytes -1: expected a number >= 0" -- "$MESHCAST" plan "${SMALL[@]}" --chunk-bytes -1
check plan-bad-search-effort 2 "bad --search-effort -1: expected a number >= 0" -- "$MESHCAST" plan "${SMALL[@]}" --search-effort -1

check unknown-verb 2 "" -- "$MESHCAST" teleport
check help 0 "Usage" -- "$MESHCAST" --help
check version 0 "[0-9]+\.[0-9]+\.[0-9]+" -- "$MESHCAST" --version
SCHED=(schedule --stages 4 --microbatches 8)
check schedule-eager-order 0 "stage 0: F0 F1 F2 F3 F4 F5 F6 B0 F7 B1" -- "$MESHCAST" "${SCHED[@]}" --kind eager-1f1b
check schedule-eager-makespan 0 "makespan 25 s" -- "$MESHCAST" "${SCHED[@]}" --kind eager-1f1b --transfer-s 0.5
check schedule-json 0 '"meshcast_version".*"simulation"' -- "$MESHCAST" "${SCHED[@]}" --kind 1f1b --format json
check schedule-csv 0 "^0,F0,F1,F2,F3,B0" -- "$MESHCAST" "${SCHED[@]}" --kind 1f1b --format csv
check schedule-lowered 0 "stage 1: recv\(a0<-0\) F0" -- "$MESHCAST" "${SCHED[@]}" --kind gpipe --format lowered
check schedule-svg 0 "^<svg" -- "$MESHCAST" "${SCHED[@]}" --kind 1f1b --format svg
check schedule-trace 0 '"traceEvents"' -- "$MESHCAST" "${SCHED[@]}" --kind interleaved-1f1b --chunks 2 --format trace
check schedule-bad-kind 2 "bad schedule kind 'zigzag'" -- "$MESHCAST" "${SCHED[@]}" --kind zigzag
check schedule-bad-chunks 2 "needs the microbatches \(6\) to be a multiple of the stages \(4\)" -- "$MESHCAST" schedule --kind interleaved-1f1b -n 4 -m 6 -v 2
check schedule-negative-time 2 "bad --forward-s -1: expected a number >= 0" -- "$MESHCAST" "${SCHED[@]}" --kind 1f1b --forward-s -1
check schedule-missing-kind 2 "missing --kind" -- "$MESHCAST" schedule -n 2 -m 2
check schedule-too-large 2 "schedule too large: 100000 stages x 100000 microbatches" -- "$MESHCAST" schedule --kind 1f1b -n 100000 -m 100000
# 9 million microbatch-chunks ran for minutes and gigabytes (and would print 110 MB): refused.
check schedule-too-large-to-simulate 2 "schedule too large: 3000 stages x 3000 microbatches x 1 chunks = 9000000 microbatch-chunks, expected at most 1000000" -- "$MESHCAST" schedule --kind 1f1b -n 3000 -m 3000
TMP=$(mktemp -d)
printf 'F0 B0 F1 B1\nF1 B1 F0 B0\n' >"$TMP/deadlock.txt"
check schedule-check-deadlock 2 "deadlock: stage 0 at step 1 \(B0\) waits for the gradient of microbatch 0 from stage 1" -- "$MESHCAST" schedule --check "$TMP/deadlock.txt"
printf 'F0 F1 B0 B1\nF0 B0 F1\n' >"$TMP/missing.txt"
check schedule-check-missing 2 "stage 1 lacks B1" -- "$MESHCAST" schedule --check "$TMP/missing.txt"
"$MESHCAST" schedule --kind eager-1f1b -n 3 -m 5 --format json -o "$TMP/eager.json"
check schedule-check-roundtrip 0 "makespan 14 s" -- "$MESHCAST" schedule --check "$TMP/eager.json"
check schedule-unwritable 2 "cannot write" -- "$MESHCAST" "${SCHED[@]}" --kind 1f1b -o "$TMP/no/such/dir/x.svg"
trap 'rm -rf "$PLAN_DIR" "$TMP"' EXIT
CONFIGS=$(dirname "$0")/../configs
check pipeline-gpt 0 "broadcast\+overlap\+eager-1f1b +eager-1f1b +broadcast +yes" -- "$MESHCAST" pipeline --config "$CONFIGS/gpt-2.6b-pp2.json"
check pipeline-json 0 '"meshcast_version".*"methods"' -- "$MESHCAST" pipeline --config "$CONFIGS/u-transformer.json" --format json -m 4
check pipeline-missing 2 "cannot read pipeline config file '/no/such.json': no such file" -- "$MESHCAST" pipeline --config /no/such.json
check pipeline-bad-method 2 "bad --method 'teleport'" -- "$MESHCAST" pipeline --config "$CONFIGS/gpt-2.6b-pp2.json" --method teleport --svg /tmp/never-written.svg
TMP=$(mktemp -d)
echo '{"cluster": {"hosts": 1}, "microbatches": 2, "stages": [{"mesh": "1", "first_host": 0, "forward_s": 1}, {"mesh": "1", "devices": [0], "forward_s": 1}], "edges": []}' >"$TMP/nochain.json"
check pipeline-no-chain 2 "edges lack 0->1" -- "$MESHCAST" pipeline --config "$TMP/nochain.json"
"$MESHCAST" pipeline --config "$CONFIGS/u-transformer.json" -m 4 --svg "$TMP/u.svg" --trace "$TMP/u.json" >/dev/null
check pipeline-svg 0 "^<svg" -- head -c 4 "$TMP/u.svg"
check pipeline-trace 0 '"traceEvents"' -- cat "$TMP/u.json"
# meshcast pipeline --run: real compute verified against the whole model, with and without overlap
check pipeline-run-verify 0 '"verified":true' -- "$MESHCAST" pipeline --config "$CONFIGS/gpt-testbed.json" --run --compute real --verify --size-factor 0.25 -m 3 --format json
check pipeline-run-verify-no-overlap 0 'eager-1f1b +broadcast +no .* yes$' -- "$MESHCAST" pipeline --config "$CONFIGS/gpt-testbed.json" --run --compute real --verify --size-factor 0.25 -m 3 --no-overlap
# Interleaved-1F1B: the config's 8 stages are 4 stages x 2 chunks (--chunks 2)
check pipeline-chunks 0 '^broadcast +interleaved-1f1b +broadcast +yes ' -- "$MESHCAST" pipeline --config "$CONFIGS/gpt-interleaved-testbed.json" --chunks 2
# The schedule column is as wide as its longest name: "transfer" starts where the rows' do.
check pipeline-chunks-columns 0 '^method {25}schedule {9}transfer' -- "$MESHCAST" pipeline --config "$CONFIGS/gpt-interleaved-testbed.json" --chunks 2
check pipeline-chunks-bad 2 "bad --chunks 3: expected a divisor of the config's 8 stages" -- "$MESHCAST" pipeline --config "$CONFIGS/gpt-interleaved-testbed.json" --chunks 3
check pipeline-run-interleaved-verify 0 '^broadcast +interleaved-1f1b +broadcast +yes .* yes$' -- "$MESHCAST" pipeline --config "$CONFIGS/gpt-interleaved-testbed.json" --chunks 2 --run --compute real --verify --size-factor 0.25 -m 4
check pipeline-run-interleaved-verify-no-overlap 0 '^send_recv +interleaved-1f1b +send_recv +no .* yes$' -- "$MESHCAST" pipeline --config "$CONFIGS/gpt-interleaved-testbed.json" --chunks 2 --run --compute real --verify --size-factor 0.25 -m 4 --no-overlap
check pipeline-run-chunks-mesh 2 "model stage 2 is chunk 1 of stage 0, whose chunk 0 \(model stage 0\) is on devices \[0,1\]" -- "$MESHCAST" pipeline --config "$CONFIGS/gpt-testbed.json" --chunks 2 --run -m 2
"$MESHCAST" pipeline --config "$CONFIGS/u-transformer-testbed.json" --run -m 2 --method eager-1f1b --svg "$TMP/run.svg" --trace "$TMP/run.json" >/dev/null 2>&1
check pipeline-run-svg 0 "measured" -- cat "$TMP/run.svg"
check pipeline-run-svg-simulated 0 "simulated" -- cat "$TMP/run-simulated.svg"
check pipeline-run-trace 0 '"traceEvents"' -- cat "$TMP/run.json"
printf 'stage 0: F0 F1 B0 B1\nstage 1: F0 B0 F1 B1\nstage 2: F0 F1 B0 B1\nstage 3: F0 F1 B0 B1\n' >"$TMP/deadlock.txt"
check pipeline-run-deadlock 2 "deadlock: .*stage 1 at step 1 \(B0\) waits for the gradient" -- timeout 60 "$MESHCAST" pipeline --config "$CONFIGS/gpt-testbed.json" --run -m 2 --schedule "$TMP/deadlock.txt"
echo '{"hosts": 1, "devices_per_host": 4}' >"$TMP/small-cluster.json"
check pipeline-run-no-fit 2 "stage 2 does not fit the cluster of" -- "$MESHCAST" pipeline --config "$CONFIGS/gpt-testbed.json" --run --cluster "$TMP/small-cluster.json"
check pipeline-run-verify-timed 2 "needs --compute real" -- "$MESHCAST" pipeline --config "$CONFIGS/gpt-testbed.json" --run --verify
check pipeline-run-real-shapes 2 "one shape and dtype" -- "$MESHCAST" pipeline --config "$CONFIGS/u-transformer.json" --run --compute real --size-factor 0.02 -m 2
# A one-stage pipeline (no edges, so no channel) runs its compute alone; it crashed (exit 139).
echo '{"cluster": {"hosts": 1, "devices_per_host": 2}, "microbatches": 2, "stages": [{"mesh": "2", "first_host": 0, "forward_s": 0.001}], "edges": []}' >"$TMP/one-stage.json"
check pipeline-run-one-stage 0 "^eager-1f1b +eager-1f1b +broadcast +yes " -- "$MESHCAST" pipeline --config "$TMP/one-stage.json" --run -m 2
check pipeline-run-one-stage-real 2 "the model has no edges \(one stage\): expected --compute timed" -- "$MESHCAST" pipeline --config "$TMP/one-stage.json" --run -m 2 --compute real
# Times beyond what the clock can wait for: a timeout means forever (it ended the run at once,
# exit 3), a transfer delay is refused (it was accepted and added none).
check pipeline-run-timeout-huge 0 "^eager-1f1b +eager-1f1b" -- "$MESHCAST" pipeline --config "$TMP/one-stage.json" --run -m 2 --timeout 1e10
check pipeline-transfer-delay-huge 2 "bad --transfer-delay 1e300: expected a number in 0..1000000000" -- "$MESHCAST" pipeline --config "$TMP/one-stage.json" --run --transfer-delay 1e300
# An edge tensor too large for this machine: the memory check, before any buffer (it ended in
# std::bad_alloc, exit 1). 2^40 x 2^20 float32 = 4 EiB.
echo '{"cluster": {"hosts": 2, "devices_per_host": 1}, "microbatches": 2, "stages": [{"mesh": "1", "first_host": 0, "forward_s": 0.001}, {"mesh": "1", "first_host": 1, "forward_s": 0.001}], "edges": [{"from": 0, "to": 1, "tensors": [{"shape": [1099511627776, 1048576], "src_spec": "RR", "dst_spec": "RR"}]}]}' >"$TMP/huge-edge.json"
check pipeline-run-huge-edge 2 "the pipeline's buffers of 2 device\(s\) on this machine need .* GiB \(every edge tensor's tiles for 2 microbatches, both directions\), more than the .* GiB this machine has available: expected smaller tensors \(--size-factor F < 1\)" -- "$MESHCAST" pipeline --config "$TMP/huge-edge.json" --run
# One meaning per option: pipeline's tensor factor is --size-factor; --scale (a paper case's
# divisor elsewhere) is refused naming it.
check pipeline-scale-refused 2 "bad --scale 0.25: pipeline has no --scale .*expected --size-factor F" -- "$MESHCAST" pipeline --config "$CONFIGS/gpt-testbed.json" --run --compute real --scale 0.25 -m 3
check pipeline-size-factor-range 2 "bad --size-factor 2: expected a number > 0 and <= 1" -- "$MESHCAST" pipeline --config "$CONFIGS/gpt-testbed.json" --size-factor 2
# meshcast run / bench on the local backend (the mpi backend: runtime_mpi_cli_test.sh)
RUN=(--shape 8,12 --dtype int64 --src-mesh 2x2 --src-spec S0S1 --dst-mesh 2x2 --dst-spec RS01)
check run-local-verify 0 "checked, 0 wrong" -- "$MESHCAST" run "${RUN[@]}" --verify --iters 2
check run-local-json 0 '"verified":true' -- "$MESHCAST" run "${RUN[@]}" --verify --json --strategy allgather
check run-prediction 0 "predicted: .* by the simulator" -- "$MESHCAST" run "${RUN[@]}" --iters 1
check run-bad-backend 2 "bad backend 'foo': expected local or mpi" -- "$MESHCAST" run "${RUN[@]}" --backend foo
check run-bad-iters 2 "bad --iters 0: expected a number in 1..1000000000" -- "$MESHCAST" run "${RUN[@]}" --iters 0
# Counts whose sum overflowed an int (a crash, exit 139) and a timeout past the clock's range (exit
# 3 at once).
check run-iters-overflow 2 "bad --iters 2147483647: expected a number in 1..1000000000" -- "$MESHCAST" run "${RUN[@]}" --iters 2147483647 --warmup 1
check run-timeout-huge 0 "checked, 0 wrong" -- "$MESHCAST" run "${RUN[@]}" --verify --iters 1 --timeout 1e10
check run-bad-cluster 2 "cannot read cluster file '/nonexistent.json'" -- "$MESHCAST" run "${RUN[@]}" --cluster /nonexistent.json
check bench-local-verify 0 "backend local" -- "$MESHCAST" bench --backend local --cases 7 --bytes 65536 --iters 1 --verify
check bench-bad-bytes 2 "bad --bytes -1" -- "$MESHCAST" bench --backend local --bytes -1
check bench-warmup-overflow 2 "bad --warmup 2147483647: expected a number in 0..1000000000" -- "$MESHCAST" bench --backend local --cases 7 --bytes 65536 --warmup 2147483647
check bench-local-predicted 0 "^7 .*broadcast/order .* [0-9.]+ (s|ms|µs) +[0-9]+\.[0-9]{3}$" -- "$MESHCAST" bench --backend local --cases 7 --bytes 65536 --iters 1 --strategies broadcast
echo '{"nic_gbps": 1, "dev_gbps": 50, "hosts": 5, "devices_per_host": 4}' >"$TMP/links.json"
check bench-cluster-links 0 '"hosts":3,.*"nic_gbps":1\.0.*"cluster_file":"[^"]*links.json".*"lower_bound_s":17\.1798' -- "$MESHCAST" bench --cases 7 --strategies broadcast --cluster "$TMP/links.json" --json
echo '{"nic_gbps": 0.08}' >"$TMP/slow.json"
check bench-cluster-bytes 0 '"tensor_bytes":8388608' -- "$MESHCAST" bench --backend local --cases 7 --strategies broadcast --iters 1 --cluster "$TMP/slow.json" --json
echo '{"hosts": 2, "host_nic_gbps": [1, 2]}' >"$TMP/perhost.json"
check bench-cluster-per-host 2 "gives per-host NIC figures" -- "$MESHCAST" bench --cluster "$TMP/perhost.json"
check bench-cluster-missing 2 "cannot read cluster file '/nonexistent.json'" -- "$MESHCAST" bench --cluster /nonexistent.json
trap 'rm -rf "$PLAN_DIR" "$TMP"' EXIT

# meshcast simulate / bench on the flow-level simulator
TMP=$(mktemp -d)
check simulate-text 0 "lower bound +1\.718 s +ratio 1\.0" -- "$MESHCAST" simulate --paper-case 7
check simulate-json 0 '"ops":\[\{"end_s"' -- "$MESHCAST" simulate --paper-case 7 --json
check simulate-nics 0 "2 NIC\(s\) per host" -- "$MESHCAST" simulate --paper-case 7 --strategy send_recv --nics-per-host 2
echo '{"nic_gbps": 20, "host_nics": [1, 2, 2]}' >"$TMP/cluster.json"
check simulate-cluster-file 0 "at 20 Gbps.*per-host overrides" -- "$MESHCAST" simulate --paper-case 7 --cluster "$TMP/cluster.json"
echo '{"nics_per_host": 0}' >"$TMP/bad-cluster.json"
check simulate-bad-cluster 2 "bad NICs per host 0: expected 1..1024" -- "$MESHCAST" simulate --paper-case 7 --cluster "$TMP/bad-cluster.json"
echo '{"hosts": 2000000000}' >"$TMP/huge-cluster.json"
check simulate-huge-cluster 2 "cluster of 2000000000 hosts x 4 devices .* expected at most 4194304" -- "$MESHCAST" simulate --paper-case 7 --cluster "$TMP/huge-cluster.json"
check simulate-no-cluster 2 "cannot read cluster file '/no/such.json'" -- "$MESHCAST" simulate --paper-case 7 --cluster /no/such.json
check simulate-bad-nics 2 "bad --nics-per-host -1" -- "$MESHCAST" simulate --paper-case 7 --nics-per-host -1
check plan-nics 0 "on 3 hosts x 4 devices, 2 NICs each" -- "$MESHCAST" plan --paper-case 7 --nics-per-host 2
check plan-nics-bound 0 "estimate: .*\(1\.0[0-4][0-9]x the lower bound\)" -- "$MESHCAST" plan --paper-case 7 --nics-per-host 2
check plan-bad-nics 2 "bad --nics-per-host 0: expected a number in 1..1024" -- "$MESHCAST" plan --paper-case 7 --nics-per-host 0
"$MESHCAST" plan --paper-case 7 --json >"$TMP/p7.json"
check simulate-plan-nics 2 "--nics-per-host conflicts with --plan" -- "$MESHCAST" simulate --plan "$TMP/p7.json" --nics-per-host 2
# The bound's term, where it is this version's count; a plan document whose bound is not (here
# edited) names none.
check simulate-bound-term 0 "bound term +in\(h\) of host 1: what it takes in over its NICs" -- "$MESHCAST" simulate --paper-case 7
check simulate-bound-term-json 0 '"bound_term":\{"at":1,"term":"in","text":"in\(h\) of host 1: ' -- "$MESHCAST" simulate --paper-case 7 --json
check plan-bound-term 0 "bound term:  in\(h\) of host 1" -- "$MESHCAST" plan --paper-case 7
sed 's/"lower_bound_s":[0-9.e+-]*/"lower_bound_s":2.5/' "$TMP/p7.json" >"$TMP/p7-edited.json"
check simulate-bound-term-other 0 "bound term +- \(the plan document's bound is not this version's count\)" -- "$MESHCAST" simulate --plan "$TMP/p7-edited.json"
check simulate-bound-term-other-json 0 '"bound_term":null' -- "$MESHCAST" simulate --plan "$TMP/p7-edited.json" --json
check bench-bound-term 0 '"bound_term":"in"' -- "$MESHCAST" bench --cases 7 --strategies broadcast --json
# The planning progress line: on a terminal (script's pseudo-terminal), once the search has run a
# second; never in a pipe. A layout whose search takes seconds: 8 NICs, three holders, 35 receivers.
SLOW_PLAN=(simulate --shape 67108864 --dtype float64 --src-mesh 3 --src-spec S0 --src-devices 0,1,2
  --dst-mesh 5x7 --dst-spec R --dst-devices 8,9,10,11,12,13,14,16,17,18,19,20,21,22,24,25,26,27,28,29,30,32,33,34,35,36,37,38,40,41,42,43,44,45,46
  --hosts 8 --devices-per-host 8 --nics-per-host 8)
started=$(date +%s%N)
tty_out=$(script -qec "$(printf '%q ' "$MESHCAST" "${SLOW_PLAN[@]}")" /dev/null 2>&1)
took_ms=$(( ($(date +%s%N) - started) / 1000000 ))
if (( took_ms < 1500 )); then
  echo "SKIP plan-progress-tty: the search took ${took_ms} ms, too little for a line after a second"
elif grep -qE "planning: [0-9]+ candidate plans simulated in [0-9.]+ s, the fastest [0-9.]+x the lower bound" <<<"$tty_out" &&
     grep -qE "simulated time" <<<"$tty_out"; then
  passes=$((passes + 1))
else
  echo "FAIL plan-progress-tty: no progress line on a terminal (${took_ms} ms)"; echo "$tty_out" | tail -5
  failures=$((failures + 1))
fi
if "$MESHCAST" "${SLOW_PLAN[@]}" 2>&1 | grep -q "planning:"; then
  echo "FAIL plan-progress-pipe: a progress line in a pipe"; failures=$((failures + 1))
else
  passes=$((passes + 1))
fi
# plan --cluster: made for the file's cluster (as --nics-per-host 2 makes it), or a --plan document
# counted on it; a missing file, or with --check, refused.
echo '{"nics_per_host": 2}' >"$TMP/two-nics.json"
"$MESHCAST" plan --paper-case 7 --nics-per-host 2 --json >"$TMP/p7-two-nics.json"
"$MESHCAST" plan --paper-case 7 --cluster "$TMP/two-nics.json" --json >"$TMP/p7-cluster.json"
check plan-cluster-file 0 '"nics_per_host":2' -- cat "$TMP/p7-cluster.json"
check plan-cluster-same 0 "" -- cmp "$TMP/p7-two-nics.json" "$TMP/p7-cluster.json"
check plan-cluster-plan-file 0 "on 3 hosts x 4 devices, NICs per host as the cluster lists them" -- "$MESHCAST" plan --plan "$TMP/p7.json" --cluster "$TMP/cluster.json"
check plan-cluster-missing 2 "cannot read cluster file '/no/such.json'" -- "$MESHCAST" plan --paper-case 7 --cluster /no/such.json
echo '{"hosts": 1}' >"$TMP/one-host.json"
check plan-cluster-too-small 2 "cluster file '.*one-host.json' does not fit the meshes: .*uses device 4, but the cluster has 1 hosts" -- "$MESHCAST" plan --paper-case 7 --cluster "$TMP/one-host.json"
check simulate-plan-cluster-too-small 2 "cluster file '.*one-host.json' does not fit the meshes" -- "$MESHCAST" simulate --plan "$TMP/p7.json" --cluster "$TMP/one-host.json"
check plan-cluster-check 2 "--cluster conflicts with --check" -- "$MESHCAST" plan --check "$TMP/p7.json" --cluster "$TMP/two-nics.json"
"$MESHCAST" plan --paper-case 7 --strategy allgather --json >"$TMP/plan.json"
check simulate-plan-file 0 "plan: allgather balance size" -- "$MESHCAST" simulate --plan "$TMP/plan.json"
"$MESHCAST" simulate --paper-case 1 --trace "$TMP/trace.json" >/dev/null
check simulate-trace 0 '"traceEvents".*"name":"nic0.out"' -- cat "$TMP/trace.json"
check simulate-unwritable 2 "cannot write" -- "$MESHCAST" simulate --paper-case 1 --trace "$TMP/no/dir/t.json"
check bench-paper 0 "^7 .*broadcast/order .* 7\.9[0-9]x" -- "$MESHCAST" bench --cases 1,7
check bench-json 0 '"backend":"sim".*"rows":\[\{"algbw_gbs":[0-9.e-]+,"balance":"size","bound_term":"in","case":7,.*"nicbw_gbs":[0-9.e-]+' -- "$MESHCAST" bench --cases 7 --json
"$MESHCAST" bench --cases 2,6 --svg "$TMP/chart.svg" >/dev/null
check bench-svg 0 "case 6" -- cat "$TMP/chart.svg"
check bench-single-sender 0 "4x2 .*broadcast/order" -- "$MESHCAST" bench --suite single-sender --strategies broadcast
check bench-random 0 "^r3 " -- "$MESHCAST" bench --suite random --count 3 --seed 5 --strategies send_recv,broadcast/order
# The soak of docs/reliability.md, short: 100 random cases x 5 strategies played and verified.
check bench-random-soak-local 0 "^verify: [0-9]+ destination elements checked in 500 rows, 0 wrong$" -- "$MESHCAST" bench --suite random --count 100 --seed 1 --backend local --verify --bytes 16384 --iters 1 --warmup 0
check bench-scale 0 "\(4,8\) RRR +broadcast/order" -- "$MESHCAST" bench --grow --grow-hosts 4 --cases 7 --strategies broadcast
check bench-grow-sharded 0 '"case":"s","effective_gbps":[0-9.]+,"layout":"\(4,8\) S0RS1 -> \(4,8\) S01RR"' -- "$MESHCAST" bench --grow --grow-hosts 4 --cases 7 --strategies broadcast/order --json
check bench-bad-strategy 2 "bad strategy 'teleport' in --strategies" -- "$MESHCAST" bench --strategies send_recv,teleport
check bench-bad-case 2 "bad case '9' in --cases" -- "$MESHCAST" bench --cases 1,9
check bench-bad-suite 2 "bad --suite 'foo': expected paper, single-sender, random, weights or weights-moe" -- "$MESHCAST" bench --suite foo
check bench-random-hosts-of-8 0 "on [1-8]x8( split)? +broadcast/order" -- "$MESHCAST" bench --suite random --count 2 --seed 5 --devices-per-host 8 --strategies broadcast/order
check bench-bad-devices-per-host 2 "bad --devices-per-host 8 with --suite paper: expected --suite random" -- "$MESHCAST" bench --devices-per-host 8
check bench-bad-devices-per-host-batch 2 "bad --devices-per-host 8 with --batch: expected --suite random" -- "$MESHCAST" bench --suite random --batch "$TMP/none.json" --devices-per-host 8
check bench-bad-hosts 2 "bad host count '3' in --grow-hosts" -- "$MESHCAST" bench --grow --grow-hosts 3
check bench-unwritable 2 "cannot write" -- "$MESHCAST" bench --cases 1 --svg "$TMP/no/dir/c.svg"
LLAMA=(--arch llama --hidden 64 --layers 4 --ffn 96 --vocab 100)
check model-llama 0 "llama model: 39 tensors" -- "$MESHCAST" model "${LLAMA[@]}" --heads 8 --kv-heads 2 --train tp=4,pp=2 --serve tp=2,replicas=4 -o "$TMP/llama.json"
check model-llama-file 0 '"name":"layers.3.mlp.down.weight","shape":\[64,96\],"src":\{"devices":\[4,5,6,7\],"mesh":\[1,4\],"spec":"RS1"\}' -- cat "$TMP/llama.json"
check model-gpt-stdout 0 '"name":"layers.0.attn.qkv.bias"' -- "$MESHCAST" model --arch gpt --hidden 64 --layers 2 --heads 8 --ffn 256 --vocab 100 --positions 32 --train tp=2,dp=2 --serve tp=4
check model-bad-arch 2 "bad architecture 'bert': expected llama, gpt or moe" -- "$MESHCAST" model --arch bert
check model-bad-train 2 "bad entry 'tp=0' in --train" -- "$MESHCAST" model --train tp=0 -o "$TMP/bad.json"
check model-bad-serve-key 2 "bad entry 'dp=2' in --serve 'tp=2,dp=2': expected tp=N, pp=N, replicas=N or ep=N" -- "$MESHCAST" model --serve tp=2,dp=2 -o "$TMP/bad.json"
# moe: a shrunk DeepSeek-V3 (its preset with small dimensions) on the H20 preset, EP on both sides.
MOE=(--preset deepseek-v3 --hidden 64 --layers 3 --heads 4 --q-lora-rank 16 --kv-lora-rank 8 --qk-nope-dim 4 --qk-rope-dim 4 --v-head-dim 4 --experts 16 --moe-ffn 8 --ffn 32 --vocab 100 --dense-layers 1 --dtype float8_e4m3fn)
check model-moe 0 "deepseek-v3 model: 49 tensors" -- "$MESHCAST" model "${MOE[@]}" --train tp=2,pp=3,dp=4,ep=8 --serve tp=4,ep=4,replicas=2 --cluster "$CONFIGS/clusters/h20.json" -o "$TMP/moe.json"
check model-moe-experts 0 '"name":"model.layers.2.mlp.experts.down_proj.weight","shape":\[16,64,8\],"src":\{"devices":\[16,17,18,19,20,21,22,23\],"mesh":\[1,8,1\],"spec":"S1RS2"\}' -- cat "$TMP/moe.json"
check model-moe-cluster 0 '"cluster":\{"dev_gbps":3600.0,"devices_per_host":8,"hosts":4,"latency_us":5.0,"nic_gbps":400.0,"nics_per_host":8\}' -- cat "$TMP/moe.json"
check model-moe-run 0 "verify: [0-9]+ destination elements checked, 0 wrong" -- "$MESHCAST" run --batch "$TMP/moe.json" --verify
check model-moe-ep-divides 2 "bad --train ep=3: expected a divisor of the model's 256 experts" -- "$MESHCAST" model --preset deepseek-v3 --train tp=3,ep=3 -o "$TMP/bad.json"
check model-moe-serve-ep 2 "bad --serve 'tp=4,ep=8': ep=8 expected to divide tp=4" -- "$MESHCAST" model --preset kimi-k2 --serve tp=4,ep=8 -o "$TMP/bad.json"
check model-moe-ep-dense 2 "bad --train ep=2,etp=1: expected 1 for a dense llama model" -- "$MESHCAST" model --train tp=2,ep=2 -o "$TMP/bad.json"
check model-bad-preset 2 "bad preset 'gpt-5': expected deepseek-v3, kimi-k2 or qwen3-235b-a22b" -- "$MESHCAST" model --preset gpt-5 -o "$TMP/bad.json"
check model-preset-arch 2 "bad arch 'gpt' with preset 'kimi-k2': expected moe" -- "$MESHCAST" model --arch gpt --preset kimi-k2 -o "$TMP/bad.json"
check model-cluster-excludes 2 "--nic-gbps conflicts with --cluster" -- "$MESHCAST" model --cluster "$CONFIGS/clusters/h100.json" --nic-gbps 100 -o "$TMP/bad.json"
check model-too-many-stages 2 "bad --train pp=8: expected at most the model's 4 layers" -- "$MESHCAST" model "${LLAMA[@]}" --heads 8 --train pp=8 -o "$TMP/bad.json"
check model-bad-heads 2 "bad heads 7: expected a divisor of hidden 64" -- "$MESHCAST" model "${LLAMA[@]}" --heads 7 -o "$TMP/bad.json"
check model-nothing-written 1 "" -- test -e "$TMP/bad.json"
trap 'rm -rf "$PLAN_DIR" "$TMP"' EXIT

# One error format, the real problem named (docs/cli.md#errors).
check err-did-you-mean 2 "^meshcast: error: unknown option '--src_mesh': expected an option of \`meshcast tasks --help\` \(did you mean '--src-mesh'\?\)" -- "$MESHCAST" tasks --src_mesh 2x4
check err-verb-did-you-mean 2 "unknown verb 'plna': expected one of .* \(did you mean 'plan'\?\)" -- "$MESHCAST" plna
check err-not-a-number 2 "^meshcast: error: bad --paper-case 'seven': expected a number in 1..8" -- "$MESHCAST" tasks --paper-case seven
check err-required 2 "^meshcast: error: missing --config: expected it" -- "$MESHCAST" pipeline
check err-paper-case-conflict 2 "^meshcast: error: --paper-case conflicts with --shape: expected one of them" -- "$MESHCAST" tasks --paper-case 7 --shape 8,8
check err-plan-conflict 2 "^meshcast: error: --paper-case conflicts with --plan" -- "$MESHCAST" simulate --plan p.json --paper-case 7
check err-scale-needs-case 2 "^meshcast: error: --scale without --paper-case: expected --paper-case too" -- "$MESHCAST" tasks --scale 4 --shape 8 --src-mesh 2 --src-spec S0 --dst-spec R
check err-limit-negative 2 "^meshcast: error: bad --limit -1: expected a number >= 0" -- "$MESHCAST" tasks --paper-case 7 --limit -1
check err-limit-json 2 "^meshcast: error: --json conflicts with --limit" -- "$MESHCAST" tasks --paper-case 7 --json --limit 2
check err-nic-gbps 2 "^meshcast: error: bad --nic-gbps 0: expected a number > 0" -- "$MESHCAST" plan --paper-case 7 --nic-gbps 0
check err-schedule-stages 2 "^meshcast: error: missing --stages \(-n\)" -- "$MESHCAST" schedule --kind 1f1b
check err-schedule-check-kind 2 "^meshcast: error: --(check|kind) conflicts with --(check|kind)" -- "$MESHCAST" schedule --check x.txt --kind 1f1b
check err-missing-file 2 "^meshcast: error: cannot read schedule file '/no/such': no such file" -- "$MESHCAST" schedule --check /no/such
check err-missing-plan 2 "^meshcast: error: cannot read plan file '/no/such': no such file" -- "$MESHCAST" plan --check /no/such
printf '{"order": [' > "$TMP/broken.json"
check err-malformed-file 2 "^meshcast: error: schedule file '.*broken.json' is not JSON" -- "$MESHCAST" schedule --check "$TMP/broken.json"
printf 'stage 0: F0 B0\nstage 1: F0 X0 B0\n' > "$TMP/bad-step.txt"
check err-schedule-step 2 "^meshcast: error: schedule file '.*': stage 1 step 1: bad step 'X0'" -- "$MESHCAST" schedule --check "$TMP/bad-step.txt"
check err-dst-mesh 2 "^meshcast: error: destination mesh: mesh 2x8 puts 8 devices on each host, but hosts have 4" -- "$MESHCAST" tasks --shape 8,8 --src-mesh 2x4 --src-spec S0R --dst-mesh 2x8 --dst-spec S0R --devices-per-host 4
echo '{"nic_gbs": 100}' > "$TMP/typo-cluster.json"
check err-cluster-key 2 "unknown key 'nic_gbs': expected one of .*\(did you mean 'nic_gbps'\?\)" -- "$MESHCAST" simulate --paper-case 7 --cluster "$TMP/typo-cluster.json"
check err-bench-grow 2 "^meshcast: error: bad --suite random with --grow: expected paper" -- "$MESHCAST" bench --grow --suite random

# --batch: several tensors planned, simulated and run together; bad batch files are refused
# naming the tensor, with exit 2.
BATCH_DIR=$(mktemp -d)
cp "$(dirname "$0")/data/batch-3-tensors.json" "$BATCH_DIR/batch.json"
check batch-plan 0 "batch of 3 tensors" -- "$MESHCAST" plan --batch "$BATCH_DIR/batch.json"
check batch-plan-classes 0 "layers\.\*\.w +x2 " -- "$MESHCAST" plan --batch "$BATCH_DIR/batch.json"
"$MESHCAST" plan --batch "$BATCH_DIR/batch.json" --strategy send_recv --json >"$BATCH_DIR/plan.json"
check batch-plan-check 0 "valid plan" -- "$MESHCAST" plan --check "$BATCH_DIR/plan.json"
check batch-plan-json 0 '"tensor":2' -- cat "$BATCH_DIR/plan.json"
check batch-simulate 0 "lower bound .* ratio" -- "$MESHCAST" simulate --batch "$BATCH_DIR/batch.json"
check batch-run 0 "checked, 0 wrong" -- "$MESHCAST" run --batch "$BATCH_DIR/batch.json" --verify --iters 2
check batch-run-plan 0 "checked, 0 wrong" -- "$MESHCAST" run --plan "$BATCH_DIR/plan.json" --verify --iters 1
sed 's/"name": "layers.1.w"/"name": "layers.0.w"/' "$BATCH_DIR/batch.json" >"$BATCH_DIR/duplicate.json"
check batch-duplicate 2 "batch file '.*duplicate.json': tensors\[1\] 'layers.0.w': duplicate name, also the name of tensors\[0\]" -- "$MESHCAST" plan --batch "$BATCH_DIR/duplicate.json"
sed 's/"devices": \[5, 4, 3, 2\]/"devices": [5, 4, 3, 99]/' "$BATCH_DIR/batch.json" >"$BATCH_DIR/outside.json"
check batch-mesh-outside 2 "tensors\[2\] 'b': destination: mesh 4 uses device 99" -- "$MESHCAST" run --batch "$BATCH_DIR/outside.json" --verify
sed 's/"spec": "RS0"}, "dst"/"specs": "RS0"}, "dst"/' "$BATCH_DIR/batch.json" >"$BATCH_DIR/missing.json"
check batch-missing-field 2 "tensors\[1\] 'layers.1.w': src: unknown key 'specs': .*did you mean 'spec'" -- "$MESHCAST" simulate --batch "$BATCH_DIR/missing.json"
sed 's/"dtype": "float32",//' "$BATCH_DIR/batch.json" >"$BATCH_DIR/no-dtype.json"
check batch-missing-dtype 2 "tensors\[2\] 'b': missing key 'dtype'" -- "$MESHCAST" run --batch "$BATCH_DIR/no-dtype.json" --verify
check batch-no-file 2 "cannot read batch file '/no/such.json'" -- "$MESHCAST" plan --batch /no/such.json
echo '{"cluster": {}, "tensors": 3}' >"$BATCH_DIR/not-a-list.json"
check batch-not-a-list 2 "bad value for 'tensors': expected an array" -- "$MESHCAST" plan --batch "$BATCH_DIR/not-a-list.json"
# Buckets: a tiny llama's norms and weights travel in a few fused messages, run with every element
# checked, saved and loaded; --bucket-bytes 0 gives one message per piece.
"$MESHCAST" model --hidden 64 --layers 4 --heads 4 --ffn 128 --vocab 100 --train tp=2,pp=2 \
  --serve tp=2,replicas=2 -o "$BATCH_DIR/tiny.json" >/dev/null
check bucket-plan 0 "broadcast tensor +[0-9]+ task +[0-9]+ \[[0-9,)x\[]+ \+[0-9]+ pieces" -- "$MESHCAST" plan --batch "$BATCH_DIR/tiny.json"
check bucket-none 0 "balance order: 69 ops" -- "$MESHCAST" plan --batch "$BATCH_DIR/tiny.json" --bucket-bytes 0
check bucket-run 0 "checked, 0 wrong" -- "$MESHCAST" run --batch "$BATCH_DIR/tiny.json" --bucket-bytes 4096 --verify --iters 1
# Fused serving buffers (docs/models.md): q, k, v written into qkv_proj, gate and up into
# gate_up_proj; tp 3 splits 40 rows unevenly (14, 14, 12), leaving rows between the parts that must stay.
"$MESHCAST" model --hidden 40 --layers 2 --heads 5 --ffn 64 --vocab 100 --train tp=2 \
  --serve tp=3 --devices-per-host 2 -o "$BATCH_DIR/fused.json" >/dev/null
check fused-file 0 '"dst_buffer":\{"name":"layers.1.attn.qkv_proj","offset":\[14,0\]\}' -- cat "$BATCH_DIR/fused.json"
check fused-run 0 "0 wrong; [1-9][0-9]* bytes of bound buffers outside the tiles checked, 0 changed" -- "$MESHCAST" run --batch "$BATCH_DIR/fused.json" --verify --iters 1
"$MESHCAST" plan --batch "$BATCH_DIR/tiny.json" --json >"$BATCH_DIR/tiny-plan.json"
check bucket-plan-check 0 "valid plan, 6 ops" -- "$MESHCAST" plan --check "$BATCH_DIR/tiny-plan.json"
check bucket-bad 2 "bad --bucket-bytes -1: expected a number >= 0" -- "$MESHCAST" simulate --batch "$BATCH_DIR/tiny.json" --bucket-bytes -1
# bench --batch: the four weight-sync methods on real buffers, every element checked, staging bounded
check bench-batch-local 0 "gather_broadcast +[0-9]+ +[0-9.]+" -- "$MESHCAST" bench --batch "$BATCH_DIR/tiny.json" --backend local --verify --iters 1 --warmup 0
check bench-batch-sim 0 "suite batch, backend sim" -- "$MESHCAST" bench --batch "$BATCH_DIR/tiny.json"
check bench-batch-staging 2 "bytes of staging memory in this process .*more than the limit of 100 bytes" -- "$MESHCAST" bench --batch "$BATCH_DIR/tiny.json" --backend local --max-staging-bytes 100 --iters 1
rm -rf "$BATCH_DIR"

WEIGHTS_DIR=$(mktemp -d)
"$MESHCAST" bench --suite weights --json >"$WEIGHTS_DIR/weights.json" 2>&1
check bench-weights-json 0 '\{"description":"Llama-70B tp=8,pp=4,dp=1 -> tp=8,pp=1,replicas=8","joint_speedup":[0-9.]+,"lower_bound_s":[0-9.]+,"method":"gather_broadcast","model":"llama70b"' -- cat "$WEIGHTS_DIR/weights.json"
rm -rf "$WEIGHTS_DIR"
check bench-weights-strategies 2 "--suite weights, --suite weights-moe and --batch run every model with every method" -- "$MESHCAST" bench --suite weights --strategies send_recv
check bench-weights-moe-cases 2 "--suite weights, --suite weights-moe and --batch run every model with every method" -- "$MESHCAST" bench --suite weights-moe --cases 1

# Huge pages (docs/performance.md#huge-pages): the command starts itself again with glibc's
# hugetlb tunable set, unless GLIBC_TUNABLES is set already. Each run below waits on a FIFO for its
# batch, so its environment can be read meanwhile.
HUGE_DIR=$(mktemp -d)
"$MESHCAST" model --hidden 64 --layers 2 --heads 4 --ffn 128 --vocab 100 --train tp=2 \
  --serve tp=2 -o "$HUGE_DIR/batch.json" >/dev/null
environment_of_a_waiting_run() {  # prints the GLIBC_TUNABLES of a meshcast waiting for its batch
  mkfifo "$HUGE_DIR/fifo"
  "$@" "$MESHCAST" plan --batch "$HUGE_DIR/fifo" >/dev/null 2>&1 &
  local pid=$! seen=""
  for _ in $(seq 100); do  # until the restarted image shows its environment (10 s at most)
    seen=$(tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep '^GLIBC_TUNABLES=')
    [[ -n $seen && $(readlink "/proc/$pid/exe") == "$(readlink -f "$MESHCAST")" ]] && break
    sleep 0.1
  done
  timeout 10 cp "$HUGE_DIR/batch.json" "$HUGE_DIR/fifo"  # (a run that died never opens it)
  wait "$pid"
  rm "$HUGE_DIR/fifo"
  echo "environment: ${seen:-no GLIBC_TUNABLES}"
}
environment_of_a_waiting_run env -u GLIBC_TUNABLES >"$HUGE_DIR/ours.txt"
if grep -q '\[never\]' /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null || \
  [[ ! -r /sys/kernel/mm/transparent_hugepage/enabled ]]; then
  echo "huge-pages: this kernel gives no transparent huge pages, so meshcast must not restart"
  check huge-pages 0 "^environment: no GLIBC_TUNABLES$" -- cat "$HUGE_DIR/ours.txt"
else
  check huge-pages 0 "^environment: GLIBC_TUNABLES=glibc.malloc.hugetlb=1$" -- cat "$HUGE_DIR/ours.txt"
fi
environment_of_a_waiting_run env GLIBC_TUNABLES=glibc.malloc.check=0 >"$HUGE_DIR/users.txt"
check huge-pages-user-setting 0 "^environment: GLIBC_TUNABLES=glibc.malloc.check=0$" -- cat "$HUGE_DIR/users.txt"
rm -rf "$HUGE_DIR"

echo "$passes passed, $failures failed"
[[ $failures -eq 0 ]]
