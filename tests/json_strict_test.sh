#!/usr/bin/env bash
# Every JSON document meshcast reads refuses a key it does not know: for each reader and each
# object level of a valid document (made by meshcast itself or shipped in configs/), insert an
# unknown key and expect exit 2 with a message naming it; then drop a required key and expect
# exit 2 naming that one.
# Usage: json_strict_test.sh path/to/meshcast path/to/configs
set -u
MESHCAST=$1
CONFIGS=$2
PY=/usr/bin/python3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
passes=0

# mutate IN OUT PATH KEY [drop]: copy the JSON document IN to OUT with KEY added to (or, with
# "drop", removed from) the object at PATH (dot-separated keys and list indices; "" = top).
mutate() {
  "$PY" - "$@" <<'PYEOF'
import json, sys
src, dst, path, key = sys.argv[1:5]
drop = len(sys.argv) > 5
doc = json.load(open(src))
node = doc
for part in filter(None, path.split(".")):
    node = node[int(part)] if isinstance(node, list) else node[part]
if drop:
    del node[key]
else:
    node[key] = 1
json.dump(doc, open(dst, "w"))
PYEOF
}

expect_refusal() {  # expect_refusal NAME KEY command...
  local name=$1 key=$2
  shift 2
  local out rc
  out=$("$@" 2>&1)
  rc=$?
  if [[ $rc -ne 2 ]] || ! grep -q "'$key'" <<<"$out"; then
    echo "FAIL $name: exit $rc, expected 2 and a message naming '$key'"; echo "$out" | head -5
    failures=$((failures + 1))
  else
    passes=$((passes + 1))
  fi
}

# reader DOCUMENT NAME PATH... -- command with @ for the mutated file
reader() {
  local doc=$1 name=$2
  shift 2
  local paths=()
  while [[ $1 != -- ]]; do paths+=("$1"); shift; done
  shift
  for path in "${paths[@]}"; do
    mutate "$doc" "$work/bad.json" "$path" unknwn_key
    expect_refusal "$name unknown key at '${path:-top}'" unknwn_key "${@//@/$work/bad.json}"
  done
}

"$MESHCAST" plan --paper-case 7 --scale 64 --json > "$work/plan.json"
"$MESHCAST" schedule --kind 1f1b -n 2 -m 2 --format json > "$work/schedule.json"
"$PY" -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))["schedule"]))' \
  "$work/schedule.json" > "$work/bare-schedule.json"
echo '{"meshcast_version": "0.1.0", "hosts": 2, "devices_per_host": 4, "nic_gbps": 10,
       "dev_gbps": 100, "latency_us": 5, "nics_per_host": 1}' > "$work/cluster.json"

reader "$work/plan.json" plan "" tensors.0 tensors.0.src tensors.0.dst cluster ops.0 -- "$MESHCAST" plan --check @
reader "$work/plan.json" "simulate --plan" "" -- "$MESHCAST" simulate --plan @
reader "$work/plan.json" "run --plan" "" -- "$MESHCAST" run --plan @
reader "$work/cluster.json" "simulate --cluster" "" -- "$MESHCAST" simulate --paper-case 7 --cluster @
reader "$work/cluster.json" "run --cluster" "" -- "$MESHCAST" run --paper-case 7 --scale 64 --cluster @
reader "$work/cluster.json" "bench --cluster" "" -- "$MESHCAST" bench --cases 7 --cluster @
reader "$work/schedule.json" "schedule document" "" schedule -- "$MESHCAST" schedule --check @
reader "$work/bare-schedule.json" schedule "" -- "$MESHCAST" schedule --check @
reader "$CONFIGS/gpt-2.6b-pp2.json" "pipeline config" "" cluster stages.0 edges.0 edges.0.tensors.0 \
  -- "$MESHCAST" pipeline --config @
reader "$CONFIGS/u-transformer.json" "pipeline config" edges.0 -- "$MESHCAST" pipeline --config @

# Required keys: dropping one names it.
for key in ops strategy cluster; do
  mutate "$work/plan.json" "$work/bad.json" "" $key drop
  expect_refusal "plan without $key" $key "$MESHCAST" plan --check "$work/bad.json"
done
mutate "$work/bare-schedule.json" "$work/bad.json" "" order drop
expect_refusal "schedule without order" order "$MESHCAST" schedule --check "$work/bad.json"
mutate "$CONFIGS/gpt-2.6b-pp2.json" "$work/bad.json" "" stages drop
expect_refusal "pipeline config without stages" stages "$MESHCAST" pipeline --config "$work/bad.json"

echo "$passes passed, $failures failed"
[[ $failures -eq 0 ]]
