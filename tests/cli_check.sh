# check(): the one assertion of the CLI test scripts (sourced by cli_test.sh and
# reliability_cli_test.sh). Counts into the callers' `passes` and `failures`.
# Every command gets a time limit: a hang is a failure, not a stuck test suite.
check() {  # check NAME EXPECTED_EXIT PATTERN -- command args...
  local name=$1 want=$2 pattern=$3
  shift 4
  local out rc
  out=$(timeout 120 "$@" 2>&1)
  rc=$?
  if [[ $rc -ne $want ]]; then
    echo "FAIL $name: exit $rc, expected $want"; echo "$out" | head -20; failures=$((failures + 1))
  elif ! grep -qE -- "$pattern" <<<"$out"; then
    echo "FAIL $name: output lacks /$pattern/"; echo "$out" | head -20; failures=$((failures + 1))
  else
    passes=$((passes + 1))
  fi
}
