"""The code base is lint-clean (ruff) and its typed interfaces type-check (mypy), per pyproject.toml."""

import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_ruff_finds_nothing():
    ruff = os.path.join(os.path.dirname(sys.executable), "ruff")
    result = subprocess.run([ruff, "check", "--no-cache", "--output-format", "concise", "."], cwd=REPO,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_finds_nothing_in_the_typed_interfaces():
    mypy = os.path.join(os.path.dirname(sys.executable), "mypy")
    result = subprocess.run([mypy, "--no-incremental"], cwd=REPO, capture_output=True, text=True,
                            timeout=300, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
