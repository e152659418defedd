"""docs/new_agent.md cannot rot: its quoted code is in the named files, its runnable blocks run."""

import json
import os
import re
import shlex
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC = os.path.join(REPO, "docs", "new_agent.md")
BLOCK = re.compile(r"<!-- (excerpt: (?P<path>\S+)|run) -->\n```\w*\n(?P<code>.*?)```", re.S)
STEP = re.compile(r"<!-- (?P<kind>shell|registration|train) -->\n```\w*\n(?P<code>.*?)```", re.S)


def _blocks(kind):
    with open(DOC, encoding="utf-8") as f:
        text = f.read()
    return [m for m in BLOCK.finditer(text) if (m.group("path") is not None) == (kind == "excerpt")]


def contains_lines(text: str, excerpt: str) -> bool:
    """Whether ``excerpt``'s lines appear in ``text`` one after another, exactly (trailing spaces aside)."""
    lines = [line.rstrip() for line in text.splitlines()]
    wanted = [line.rstrip() for line in excerpt.rstrip("\n").splitlines()]
    return any(lines[i:i + len(wanted)] == wanted for i in range(len(lines) - len(wanted) + 1))


def test_every_quoted_block_is_in_its_file_as_written():
    excerpts = _blocks("excerpt")
    assert len(excerpts) >= 6
    for match in excerpts:
        with open(os.path.join(REPO, match.group("path")), encoding="utf-8") as f:
            source = f.read()
        assert contains_lines(source, match.group("code")), (
            f"docs/new_agent.md quotes {match.group('path')} as it no longer reads:\n{match.group('code')}")


def test_a_changed_line_is_noticed():
    source = "a = 1\nb = 2\nc = 3\n"
    assert contains_lines(source, "b = 2\nc = 3\n")
    assert not contains_lines(source, "b = 2\nc = 4\n") and not contains_lines(source, "a = 1\nc = 3\n")


@pytest.mark.multiprocess
def test_the_run_blocks_run(tmp_path):
    code = "\n".join(m.group("code") for m in _blocks("run"))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", MUJOCO_GL=os.environ.get("MUJOCO_GL", "osmesa"))
    result = subprocess.run([sys.executable, "-c", code], cwd=str(tmp_path), env=env, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "stop_reason: max_actor_steps evaluations: 2" in result.stdout, result.stdout


def _lines(folder: str) -> int:
    path = os.path.join(REPO, "agents", folder)
    return sum(sum(1 for _ in open(os.path.join(path, name), encoding="utf-8"))
               for name in os.listdir(path) if name.endswith(".py"))


def test_the_agents_stay_within_their_line_budgets():
    """As small as Acme's: its JAX D4PG is 651 lines; DDPG and BC reuse the platform's kits."""
    sizes = {name: _lines(name) for name in ("d4pg", "ddpg", "bc")}
    assert sizes["d4pg"] <= 650 and sizes["ddpg"] <= 200 and sizes["bc"] <= 150, sizes


def _steps():
    with open(DOC, encoding="utf-8") as f:
        return {m.group("kind"): m.group("code") for m in STEP.finditer(f.read())}


@pytest.mark.slow
@pytest.mark.multiprocess
def test_a_new_agent_from_an_empty_folder_trains_with_nothing_else_edited(tmp_path):
    sys.path.insert(0, os.path.join(REPO, "tests", "launch"))
    from cli_testlib import run_rlplat_as_user  # pylint: disable=g-import-not-at-top

    steps = _steps()
    assert set(steps) == {"shell", "registration", "train"}, "docs/new_agent.md lost a step of section 6"
    made = subprocess.run(["bash", "-euc", steps["shell"]], cwd=str(tmp_path), capture_output=True, text=True,
                          env=dict(os.environ, RLPLAT_REPO=REPO), timeout=60)
    assert made.returncode == 0, made.stderr
    assert sorted(os.listdir(tmp_path / "myagent")) == ["__init__.py", "builder.py", "config.py", "learning.py",
                                                        "spec.py"]
    # What `pip install -e .` of the documented pyproject.toml leaves for the entry points.
    entry = re.search(r'^(\w+) = "(\S+)"$', steps["registration"], re.M)
    info = tmp_path / "myagent-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: myagent\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[rlplat.agents]\n{entry.group(1)} = {entry.group(2)}\n")
    argv = shlex.split(steps["train"].strip())
    assert argv[:3] == ["rlplat", "train", "myagent"]
    logdir = tmp_path / "run"
    trained, _ = run_rlplat_as_user(*argv[1:], "--logdir", str(logdir), cwd=str(tmp_path),
                                    extra_path=str(tmp_path), timeout=600)
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert "done: " in trained.stdout
    with open(logdir / "run_info.json", encoding="utf-8") as f:
        record = json.load(f)
    assert record["agent"] == "myagent" and record["builder"] == "DDPGBuilder"
