#!/usr/bin/env bash
# Hostile input on the command line (issue 15): values that do not fit and thread limits end in
# a clear message and exit 2, in bounded time.
# Usage: reliability_cli_test.sh path/to/meshcast
set -u
MESHCAST=$1
failures=0
passes=0
source "$(dirname "$0")/cli_check.sh"

# The two commands at the top of the issue.
check shape-overflow 2 "bad shape '99999999999,99999999999,9999999': more than" -- "$MESHCAST" plan --shape 99999999999,99999999999,9999999 --src-mesh 2 --src-spec S0RR --dst-mesh 2 --dst-spec RRR
check mesh-too-large 2 "mesh 100000x100000 has 10000000000 devices: expected at most 4194304" -- "$MESHCAST" plan --shape 8,8 --src-mesh 100000x100000 --src-spec S0R --dst-mesh 2 --dst-spec RR
# Device ids are not narrowed to int.
check host-offset-overflow 2 "placed from host 1073741824 on hosts of 4 devices" -- "$MESHCAST" tasks --shape 8,8 --src-mesh 2 --src-spec S0R --dst-spec RS0 --dst-host-offset 1073741824 --devices-per-host 4
check device-list-overflow 2 "bad device id 4294967296: expected 0..4194303" -- "$MESHCAST" tasks --shape 8,8 --src-mesh 2 --src-spec S0R --dst-spec RS0 --src-devices 4294967296,1
# Shapes whose byte counts overflow: refused before any buffer is sized.
check run-tile-bytes-overflow 2 "bad shape '4294967296,4294967296'" -- "$MESHCAST" run --shape 4294967296,4294967296 --src-mesh 2 --src-spec S0R --dst-spec RS0 --iters 1 --warmup 0
check run-verify-overflow 2 "more than 9223372036854775807 bytes" -- "$MESHCAST" run --shape 9223372036854775807 --src-mesh 2 --src-spec S0 --dst-spec R --iters 1 --warmup 0 --verify
# Threads that cannot be created: an error, not a hang (the started ones are stopped).
check threads-unavailable 2 "cannot start 1000 worker threads" -- bash -c "ulimit -v 2000000; exec '$MESHCAST' run --shape 8,8 --src-mesh 2 --src-spec S0R --dst-spec RS0 --threads 1000 --iters 1 --warmup 0"

# A --cluster file too small for the plan: refused before the measurement.
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
echo '{"hosts": 1, "devices_per_host": 2}' >"$TMP/small-cluster.json"
check run-cluster-too-small 2 "cluster file '.*' does not fit the plan: .*device 2" -- "$MESHCAST" run --shape 8 --src-mesh 2 --src-spec S0 --dst-spec R --cluster "$TMP/small-cluster.json" --iters 1 --warmup 0

# Deeply nested documents: refused while parsing (every reader parses through one bounded
# parser), and no error message prints a user value recursively.
/usr/bin/python3 -c 'print("[" * 100000 + "]" * 100000)' >"$TMP/deep.json"
/usr/bin/python3 -c 'print("{\"order\":" + "[" * 100000 + "]" * 100000 + "}")' >"$TMP/deep-schedule.json"
/usr/bin/python3 -c 'print("{\"mesh\":" * 100000 + "0" + "}" * 100000)' >"$TMP/deep-object.json"
/usr/bin/python3 -c 'print("{\"order\": [[" + "[" * 30 + "]" * 30 + "]]}")' >"$TMP/deep-step.json"
check deep-plan 2 "nested more than 32 levels" -- timeout 120 "$MESHCAST" plan --check "$TMP/deep.json"
check deep-plan-object 2 "nested more than 32 levels" -- timeout 120 "$MESHCAST" plan --check "$TMP/deep-object.json"
check deep-schedule 2 "nested more than 32 levels" -- timeout 120 "$MESHCAST" schedule --check "$TMP/deep-schedule.json"
check deep-config 2 "nested more than 32 levels" -- timeout 120 "$MESHCAST" pipeline --config "$TMP/deep-object.json"
check deep-cluster 2 "nested more than 32 levels" -- timeout 120 "$MESHCAST" simulate --shape 8 --src-mesh 2 --src-spec S0 --dst-spec R --cluster "$TMP/deep-object.json"
check deep-value-excerpt 2 "an array of 1 items" -- timeout 120 "$MESHCAST" schedule --check "$TMP/deep-step.json"

# One rule for what a device holds (find_holding, shared by validate_plan and the executors'
# placement): device 2 receives [0,4) and [4,8) in two sends and then sends [0,8). The pieces
# are not joined, so plan --check, simulate and run all refuse it with the same message.
"$MESHCAST" plan --shape 8 --src-mesh 1 --src-spec R --dst-mesh 2 --dst-spec R --strategy send_recv --balance none --json >"$TMP/joined-base.json"
/usr/bin/python3 - "$TMP/joined-base.json" "$TMP/joined.json" <<'PY'
import json, sys
plan = json.load(open(sys.argv[1]))
def send(i, lo, hi, sender, receiver):
    return {"id": i, "kind": "send", "tensor": 0, "task": 0, "slice": [[lo, hi]],
            "bytes": (hi - lo) * 4, "sender": sender, "receivers": [receiver], "chunk_bytes": 0}
plan["ops"] = [send(0, 0, 4, 0, 2), send(1, 4, 8, 0, 2), send(2, 0, 8, 2, 3)]
json.dump(plan, open(sys.argv[2], "w"))
PY
JOINED="op 2 \\(send of task 0\\): sender 2 does not hold \\[0,8\\)"
check joined-box-check 2 "$JOINED" -- timeout 120 "$MESHCAST" plan --check "$TMP/joined.json"
check joined-box-simulate 2 "$JOINED" -- timeout 120 "$MESHCAST" simulate --plan "$TMP/joined.json"
check joined-box-run 2 "$JOINED" -- timeout 120 "$MESHCAST" run --plan "$TMP/joined.json" --iters 1 --warmup 0 --verify

echo "$passes passed, $failures failed"
[[ $failures -eq 0 ]]
