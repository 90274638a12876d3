#!/usr/bin/env bash
# Runs the MPI executor's tests (runtime_mpi_test) under mpirun with 2..16 ranks, oversubscribed:
# one mpirun per rank count, each looping over its corpus cases inside.
# Usage: runtime_mpi_test.sh path/to/runtime_mpi_test [rank counts...]
set -u
TEST_BINARY=$1
shift
RANKS=("$@")
[[ ${#RANKS[@]} -eq 0 ]] && RANKS=(2 3 4 5 6 7 8 9 10 11 12 13 14 15 16)
MPIRUN=(mpirun --oversubscribe)
[[ $(id -u) -eq 0 ]] && MPIRUN+=(--allow-run-as-root)
failures=0
for n in "${RANKS[@]}"; do
  start=$SECONDS
  # A hang is a failure, not a stuck suite.
  if timeout 300 "${MPIRUN[@]}" -np "$n" "$TEST_BINARY" --gtest_brief=1; then
    echo "ok: $n ranks ($((SECONDS - start)) s)"
  else
    echo "FAIL: $n ranks (exit $?)"
    failures=$((failures + 1))
  fi
done
echo "$((${#RANKS[@]} - failures)) rank counts passed, $failures failed"
[[ $failures -eq 0 ]]
