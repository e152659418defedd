#!/usr/bin/env bash
# Runs the whole test suite in the project virtualenv (run scripts/setup.sh first).
# Extra arguments go to pytest, e.g. scripts/test.sh tests/envs -k seed.
# --fast: the quick lane (pure logic and quick real-component tests, under 3 minutes
# on 2 cores): every test not marked `slow` or `multiprocess` (see pyproject.toml).
# Tests run on RLPLAT_TEST_WORKERS pytest-xdist workers (default 2), a module's
# tests on one worker (tests/conftest.py); RLPLAT_TEST_WORKERS=0 runs them in
# this process. Measured on 2 cores (AMD EPYC, fresh clones, one run each):
# 1181-1256 s in one process (38% of the CPU idle: Ray start-up waits, polls,
# timeouts under test) against 878 s on two workers (15% idle), 2026-11-26.
set -uo pipefail
cd "$(dirname "$0")/.."
VENV="${RLPLAT_VENV:-.venv}"
export MUJOCO_GL="${MUJOCO_GL:-osmesa}" TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
workers="${RLPLAT_TEST_WORKERS:-2}"
args=()
if [ "$workers" != 0 ]; then args+=(-n "$workers" --dist loadgroup); fi
for arg in "$@"; do
  if [ "$arg" = "--fast" ]; then args+=(-m "not slow and not multiprocess"); else args+=("$arg"); fi
done
# --durations: the suite must stay under 15 minutes on 2 cores; this shows what to trim.
"$VENV/bin/python" -m pytest --durations=15 ${args[@]+"${args[@]}"}
rc=$?
# pytest exits 5 when it collected nothing: for this project that is a broken suite, not a pass.
if [ "$rc" = 5 ]; then echo "test.sh: error: pytest collected no tests; check the test paths" >&2; exit 1; fi
exit "$rc"
