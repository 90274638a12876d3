#!/usr/bin/env bash
# Installs the build tree into a temporary prefix and builds tests/consumer against it with
# find_package(meshcast). Usage: install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
source=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
cmake -S "$source/tests/consumer" -B "$work/consumer" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/consumer" >/dev/null
"$work/consumer/consumer"
test -x "$work/prefix/bin/meshcast"
# The Python package, where this build has it.
if compgen -G "$build/python/meshcast/_core*.so" >/dev/null; then
  (cd "$work" && PYTHONPATH="$(echo "$work"/prefix/lib*/python3/dist-packages)" /usr/bin/python3 -c \
    'import meshcast, sys; assert meshcast.__file__.startswith(sys.argv[1]), meshcast.__file__' "$work/prefix")
fi
echo "1 passed, 0 failed"
