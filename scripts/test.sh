#!/usr/bin/env bash
# Runs the whole test suite in the project virtualenv (run scripts/setup.sh first).
# Extra arguments go to pytest, e.g. scripts/test.sh tests/envs -k seed.
# --fast: the quick lane (pure logic and quick real-component tests, under 3 minutes
# on 2 cores): every test not marked `slow` or `multiprocess` (see pyproject.toml).
# RLPLAT_TEST_WORKERS=N runs the tests on N pytest-xdist workers, each module's
# tests on one worker (--dist loadscope: module fixtures such as a training run
# or a cluster are built once); 0 runs them in this process. The
# default is 2 where the machine has 2 or more cores, else 0: one process leaves
# a core idle while tests wait on Ray start-up, polls and timeouts (the
# measurements are in docs/testing.md).
# Under xdist the modules go out longest first (seconds recorded in
# tests/module_seconds.json; tests/scheduling.py); xdist's own order (most
# tests first) left the one-test learning modules for last, one worker idle.
# Refresh the file after adding a long module:
#   scripts/test.sh --write-module-seconds tests/module_seconds.json
set -uo pipefail
cd "$(dirname "$0")/.."
VENV="${RLPLAT_VENV:-.venv}"
export MUJOCO_GL="${MUJOCO_GL:-osmesa}" TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
default_workers=0
if [ "$(nproc 2>/dev/null || echo 1)" -ge 2 ]; then default_workers=2; fi
workers="${RLPLAT_TEST_WORKERS:-$default_workers}"
args=()
if [ "$workers" != 0 ]; then args+=(-n "$workers" --dist loadscope); fi
for arg in "$@"; do
  if [ "$arg" = "--fast" ]; then args+=(-m "not slow and not multiprocess"); else args+=("$arg"); fi
done
# --durations: the suite must stay under 15 minutes on 2 cores; this shows what to trim.
"$VENV/bin/python" -m pytest --durations=15 ${args[@]+"${args[@]}"}
rc=$?
# pytest exits 5 when it collected nothing: for this project that is a broken suite, not a pass.
if [ "$rc" = 5 ]; then echo "test.sh: error: pytest collected no tests; check the test paths" >&2; exit 1; fi
exit "$rc"
