#!/usr/bin/env bash
# The emulated cluster end to end (CTest label emucluster): 3 hosts x 4 ranks on shaped NICs; MPI
# sees 3 nodes, calibration finds the shaped rate and shared memory inside a host, paper case 7
# (scaled down) arrives intact with send_recv and broadcast under the MPI backend, also with 1% of
# the packets lost (--loss-pct), on fair NICs (--nic-queue fair) and on two NICs per host
# (--nics-per-host 2, each calibrated alone and both used), and nothing (namespace, veth, bridge,
# process) is left behind, even on failure.
# Usage: emucluster_test.sh path/to/scripts/emucluster path/to/meshcast
# Exit 77 (CTest: skipped) with the reason printed when the machine cannot host the testbed.
set -u
EMU=$1
MESHCAST=$2
HOSTS=3
SLOTS=4
MBIT=200
STEP_TIMEOUT=60 # seconds per mpirun step, so a hang fails the test instead of the CTest timeout
failures=0

skip() {
  echo "SKIPPED: $*"
  exit 77
}
fail() {
  echo "FAIL $*"
  failures=$((failures + 1))
}
pass() { echo "ok   $*"; }

# --- can this machine host the testbed? -----------------------------------------------------------
[[ $(id -u) -eq 0 ]] || skip "needs root to create network namespaces, veths and tc qdiscs"
command -v mpirun >/dev/null || skip "mpirun (Open MPI) not found"
"$MESHCAST" calibrate --help >/dev/null 2>&1 || skip "meshcast was built without MPI (no calibrate verb)"
probe=mcprobe$$
if ! ip netns add "$probe" 2>/dev/null; then skip "network namespaces do not work here (ip netns add failed)"; fi
probe_tbf=$(ip netns exec "$probe" tc qdisc add dev lo root tbf rate 1mbit burst 32k limit 64k 2>&1)
probe_rc=$?
ip netns del "$probe"
[[ $probe_rc -eq 0 ]] || skip "the tbf qdisc is not available: $probe_tbf"

# --- bring up a cluster of our own: a name and subnet no other run uses ---------------------------
NAME=t$(($$ % 1000000))
AUTOGROUP=/proc/sys/kernel/sched_autogroup_enabled
# Another cluster up (not ours) keeps autogroup off after our down: check the restore only when
# ours is the only one.
autogroup_before=""
if [[ -w $AUTOGROUP ]] && ! compgen -G "/run/emucluster/*/" >/dev/null; then
  autogroup_before=$(cat "$AUTOGROUP")
fi
cleanup() {
  local pids
  pids=$(for ns in $(ip netns list | awk '{print $1}' | grep -E "^$NAME-h[0-9]+$"); do
    ip netns pids "$ns"
  done)
  "$EMU" --name "$NAME" down
  if ip netns list | grep -qE "^$NAME-h"; then fail "down left namespaces: $(ip netns list | grep "^$NAME-h" | tr '\n' ' ')"; fi
  if ip -o link show | grep -q ": $NAME-"; then fail "down left links: $(ip -o link show | grep ": $NAME-" | cut -d: -f2 | tr '\n' ' ')"; fi
  local pid
  for pid in $pids; do
    if kill -0 "$pid" 2>/dev/null; then fail "down left process $pid: $(tr '\0' ' ' <"/proc/$pid/cmdline")"; fi
  done
  if [[ -n $autogroup_before && $(cat "$AUTOGROUP") != "$autogroup_before" ]]; then
    fail "down left kernel.sched_autogroup_enabled at $(cat "$AUTOGROUP"), expected $autogroup_before (its value before up)"
  fi
  if [[ $failures -eq 0 ]]; then
    echo "PASS emucluster_test"
    exit 0
  fi
  echo "$failures check(s) failed"
  exit 1
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# bring_up [UP OPTIONS...]: the cluster on a subnet no other run uses (a few tries).
bring_up() {
  local attempt
  for attempt in 0 1 2 3 4; do
    subnet=10.213.$((100 + ($$ + attempt * 37) % 150))
    if "$EMU" --name "$NAME" up --hosts $HOSTS --nic-mbit $MBIT --slots $SLOTS --subnet "$subnet" "$@"; then
      return 0
    fi
  done
  fail "up $*: could not bring up the cluster"
  exit 1
}
bring_up
if [[ -w $AUTOGROUP ]]; then
  if [[ $(cat "$AUTOGROUP") == 0 ]]; then pass "up: autogroup scheduling off"; else fail "up left autogroup scheduling on"; fi
fi

# No process may outlive an mpirun step inside the hosts (orted, ranks).
check_no_processes() {
  local ns left=""
  for ns in $(ip netns list | awk '{print $1}' | grep -E "^$NAME-h[0-9]+$"); do
    left+=$(ip netns pids "$ns" | tr '\n' ' ')
  done
  if [[ -n ${left// /} ]]; then fail "$1: processes left in the hosts: $left"; else pass "$1: no process left in the hosts"; fi
}

run_mpi() { timeout -k 5 $STEP_TIMEOUT "$EMU" --name "$NAME" mpirun -np $((HOSTS * SLOTS)) "$@"; }

# --- MPI sees H distinct nodes, SLOTS ranks each ---------------------------------------------------
# Only stdout counts: mpirun may print warnings of its own (e.g. setpgid under a loaded machine) on
# stderr, which are shown on failure but are not host names.
mpi_stderr=$(mktemp)
names=$(run_mpi hostname 2>"$mpi_stderr")
counts=$(sort <<<"$names" | uniq -c | awk '{print $1 " " $2}' | tr '\n' ',')
expected=""
for ((h = 0; h < HOSTS; h++)); do expected+="$SLOTS $NAME-h$h,"; done
if [[ $counts == "$expected" ]]; then
  pass "hostnames: $counts"
else
  fail "hostnames: got '$counts', expected '$expected'; mpirun's stderr: $(cat "$mpi_stderr")"
fi
rm -f "$mpi_stderr"
check_no_processes hostname

# --- calibration: shaped NIC rate, shared memory inside a host ------------------------------------
lo_before=$("$EMU" --name "$NAME" run 0 cat /sys/class/net/lo/statistics/tx_bytes)
calibration=$(run_mpi "$MESHCAST" calibrate --message-bytes $((4 << 20)) --repeats 3 --json 2>&1)
calibrate_rc=$?
lo_after=$("$EMU" --name "$NAME" run 0 cat /sys/class/net/lo/statistics/tx_bytes)
if [[ $calibrate_rc -ne 0 ]]; then
  fail "calibrate exited $calibrate_rc: $calibration"
else
  json_number() { grep -o "\"$1\":[0-9.eE+-]*" <<<"$calibration" | head -1 | cut -d: -f2; }
  nic=$(json_number nic_gbps)
  dev=$(json_number dev_gbps)
  hosts=$(json_number hosts)
  per_host=$(json_number devices_per_host)
  if [[ "$hosts x $per_host" == "$HOSTS x $SLOTS" ]]; then pass "calibrate sees $hosts x $per_host"; else fail "calibrate sees '$hosts x $per_host', expected $HOSTS x $SLOTS"; fi
  # TCP/IP headers take ~4% of a 1500-byte frame, so payload runs a bit under the shaped rate; far
  # under it means the shaping or the measurement is wrong, far above it (a bypass runs at memory
  # speed) that traffic bypassed it. The rate is a slope through two sizes (1 and 4 MiB here),
  # which carries a few percent of noise on a busy machine: up to 1.05 is allowed.
  if awk -v r="$nic" -v m=$MBIT 'BEGIN { x = r * 1000 / m; exit !(x >= 0.75 && x <= 1.05) }'; then
    pass "NIC payload rate $nic Gbps is 0.75..1.05 of the shaped $MBIT Mbit/s"
  else
    fail "NIC payload rate '$nic' Gbps is not 0.75..1.05 of the shaped $MBIT Mbit/s"
  fi
  if awk -v d="$dev" -v n="$nic" 'BEGIN { exit !(d > 4 * n) }'; then
    pass "intra-host rate $dev Gbps is above 4x the NIC's"
  else
    fail "intra-host rate '$dev' Gbps is not above 4x the NIC's $nic Gbps: not shared memory?"
  fi
  # The intra-host transfers (4 MiB x 4 on host 0) must not go over loopback TCP.
  lo_bytes=$((lo_after - lo_before))
  if ((lo_bytes < 1 << 20)); then pass "intra-host bytes bypass loopback TCP ($lo_bytes B on lo)"; else fail "$lo_bytes B went over lo in host 0: intra-host traffic uses TCP, not shared memory"; fi
fi
check_no_processes calibrate

# --- paper case 7 (1x4 S1RR -> 2x4 RRR) scaled down, played with send_recv and broadcast --------
# Every destination element is checked against the pattern of its global index (--verify: exit 1
# and "wrong" in the report on any mismatch): 4x1024x512 elements on each of the 8 receivers.
# play_case7 LABEL [RUN OPTIONS...]: case 7 under the MPI backend with every element checked.
play_case7() {
  local label=$1 report rc
  shift
  report=$(run_mpi "$MESHCAST" run --backend mpi --paper-case 7 --scale 256 "$@" \
    --iters 1 --warmup 0 --verify 2>&1)
  rc=$?
  if [[ $rc -eq 0 ]] && grep -qE "verify: 16777216 destination elements checked, 0 wrong$" <<<"$report"; then
    pass "case 7 $label: every destination element right"
  else
    fail "case 7 $label: exit $rc: $report"
  fi
  check_no_processes "case 7 $label"
}
verify_case7() {  # verify_case7 LABEL: with send_recv and with broadcast
  local strategy
  for strategy in send_recv broadcast; do play_case7 "$strategy$1" --strategy $strategy; done
}
verify_case7 ""

# --- a torch.distributed job across the hosts: one torchrun node per host (emucluster torchrun) ---
# gloo between the namespaces; a chain of 1 MiB from host 0 through the others, every element of
# every receiver checked by the bench (it raises, and torchrun exits non-zero, on a wrong one).
if ! /usr/bin/python3 -c "import torch.distributed" 2>/dev/null; then
  echo "SKIPPED torchrun: /usr/bin/python3 has no torch.distributed"
elif [[ $calibrate_rc -ne 0 ]]; then
  fail "torchrun: not run, calibrate failed"
else
  cluster_file=$(mktemp)
  echo "$calibration" | grep -o '{.*}' | tail -1 >"$cluster_file"
  report=$(PYTHONPATH="$(dirname "$MESHCAST")/../../python" timeout -k 5 $STEP_TIMEOUT "$EMU" --name "$NAME" \
    torchrun --nproc-per-node 1 --port 29511 "$(dirname "$EMU")/../bench/chain_torch.py" \
    --bytes $((1 << 20)) --chunk-bytes 65536 --iters 1 --methods chain --cluster "$cluster_file" 2>&1)
  rc=$?
  if [[ $rc -eq 0 ]] && grep -q '"verified_runs": 4' <<<"$report"; then
    pass "torchrun: a chain over gloo through $HOSTS hosts, every element right"
  else
    fail "torchrun: exit $rc: $report"
  fi
  rm -f "$cluster_file"
  check_no_processes torchrun
fi

# --- the same with 1% of the packets every host sends lost (docs/reliability.md) -----------------
# TCP retransmits; the runs still complete within the step timeout and every element is right.
# (A 20 ms delay needs the netem qdisc: docs/reliability.md says where it is missing.)
"$EMU" --name "$NAME" down
bring_up --loss-pct 1
verify_case7 " with 1% loss"
dropped=0
for ((i = 0; i < HOSTS; i++)); do
  dropped=$((dropped + $(ip netns exec "$NAME-h$i" tc -s qdisc show dev eth0 |
    awk '/^qdisc clsact/ {c = 1} c && /dropped/ {sub(",", "", $7); print $7; exit}')))
done
if ((dropped > 0)); then pass "1% loss: $dropped packets dropped"; else fail "1% loss: no packet was dropped"; fi

# --- fair NICs (--nic-queue fair): each flow has a queue of its own --------------------------------
# Case 7 again, every element right; host 0 sends it over several connections, which must have
# gone through several of its NIC's queues, not one.
"$EMU" --name "$NAME" down
bring_up --nic-queue fair
verify_case7 " on fair NICs"
queues=$(ip netns exec "$NAME-h0" tc -s class show dev eth0 |
  awk '/^class htb 1:[0-9a-f]+ parent 1:1 / {leaf = 1; next} leaf && /Sent/ {if ($2 > 0) n++; leaf = 0} END {print n + 0}')
if ((queues > 1)); then pass "fair NIC: host 0's flows went through $queues queues"; else fail "fair NIC: host 0's traffic went through $queues queue(s), expected one per flow"; fi

# --- two NICs per host (--nics-per-host 2): each rank on its rail, each NIC calibrated alone -----
# Each NIC carries the shaped rate on its own (16 MiB: two ranks per NIC fit a slope through 4 MiB
# each much more noisily than the four of one NIC above); case 7 played on the calibrated two-NIC cluster
# arrives intact, and host 0's four senders (two on each rail) send through both of its NICs.
"$EMU" --name "$NAME" down
bring_up --nics-per-host 2
two_nics="$(mktemp -d)/testbed.json"
if run_mpi "$MESHCAST" calibrate --nics-per-host 2 --message-bytes $((16 << 20)) --repeats 3 \
  -o "$two_nics" >/dev/null 2>&1; then
  rates=$(/usr/bin/python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
print(d["nics_per_host"], *[n["gbps"] for n in d["calibration"]["nics"]])' "$two_nics")
  if awk -v m=$MBIT '{ ok = $1 == 2 && NF == 3; for (i = 2; i <= NF; i++) { x = $i * 1000 / m; ok = ok && x >= 0.75 && x <= 1.05 } exit !ok }' <<<"$rates"; then
    pass "two NICs: nics_per_host and each NIC's Gbps ($rates) 0.75..1.05 of the shaped $MBIT Mbit/s"
  else
    fail "two NICs: calibration gave '$rates', expected 2 and two rates 0.75..1.05 of $MBIT Mbit/s"
  fi
  tx_before=$(for r in 0 1; do ip netns exec "$NAME-h0" cat "/sys/class/net/eth$r/statistics/tx_bytes"; done)
  play_case7 "on two NICs" --cluster "$two_nics"
  sent=($(paste <(echo "$tx_before") <(for r in 0 1; do ip netns exec "$NAME-h0" cat "/sys/class/net/eth$r/statistics/tx_bytes"; done) | awk '{print $2 - $1}'))
  # Case 7 sends host 0's 8 MiB tensor to the 8 devices of hosts 1 and 2: at least 8 MiB leave
  # host 0, about half through each NIC when the ranks are on their rails (without the rail
  # binding every byte would leave by one NIC and the other carry nothing).
  if ((sent[0] > 2 << 20 && sent[1] > 2 << 20)); then
    pass "case 7 on two NICs: host 0 sent ${sent[0]} B through eth0 and ${sent[1]} B through eth1"
  else
    fail "case 7 on two NICs: host 0 sent ${sent[0]} B through eth0 and ${sent[1]} B through eth1, expected more than 2 MiB each"
  fi
else
  fail "calibrate --nics-per-host 2 failed"
fi
rm -rf "$(dirname "$two_nics")"
check_no_processes "two NICs"
