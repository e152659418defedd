"""docs/new_agent.md cannot rot: its quoted code is in the named files, its runnable blocks run."""

import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC = os.path.join(REPO, "docs", "new_agent.md")
BLOCK = re.compile(r"<!-- (excerpt: (?P<path>\S+)|run) -->\n```\w*\n(?P<code>.*?)```", re.S)


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


def test_the_agents_the_guide_names_stay_within_their_line_budgets():
    assert _lines("ddpg") <= 265 and _lines("bc") <= 150, (_lines("ddpg"), _lines("bc"))
