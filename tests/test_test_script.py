"""scripts/test.sh under pytest-xdist: each module's tests run on one worker.

Module fixtures (a training run, a fake cluster) are built once only if all of
a module's tests land on the same worker. ``--dist loadgroup`` silently stopped
doing that with pytest 9 (pytest-xdist 3.8 tags the group onto an attribute
pytest no longer reads), and the suite built such fixtures twice. This runs
the options scripts/test.sh passes on a made-up suite and checks where each
test ran.
"""

import os
import re
import stat
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _options_of_test_sh(tmp_path):
    """The pytest options scripts/test.sh passes with two workers, read through a stand-in Python."""
    fake = tmp_path / "venv" / "bin"
    fake.mkdir(parents=True)
    (fake / "python").write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    (fake / "python").chmod(stat.S_IRWXU)
    env = dict(os.environ, RLPLAT_VENV=str(tmp_path / "venv"), RLPLAT_TEST_WORKERS="2")
    out = subprocess.run([os.path.join(REPO, "scripts", "test.sh")], env=env, capture_output=True, text=True,
                         timeout=60, check=True).stdout.split("\n")
    assert out[:2] == ["-m", "pytest"], out
    return [o for o in out[2:] if o and not o.startswith("--durations")]


def test_each_modules_tests_share_one_worker(tmp_path):
    options = _options_of_test_sh(tmp_path)
    assert "-n" in options and options[options.index("-n") + 1] == "2", options
    suite = tmp_path / "suite"
    suite.mkdir()
    for module in "abc":
        tests = "".join(f"def test_{module}{i}():\n    time.sleep(0.05)\n" for i in range(6))
        (suite / f"test_{module}.py").write_text("import time\n" + tests)
    result = subprocess.run([sys.executable, "-m", "pytest", *options, "-v", "-p", "no:cacheprovider", str(suite)],
                            cwd=str(suite), capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    workers = {}
    for worker, module in re.findall(r"\[(gw\d+)\].*PASSED.*(test_[abc])\.py::", result.stdout):
        workers.setdefault(module, set()).add(worker)
    assert sorted(workers) == ["test_a", "test_b", "test_c"], result.stdout[-2000:]
    assert all(len(w) == 1 for w in workers.values()), workers
