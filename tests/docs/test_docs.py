"""The docs cannot rot: every `rlplat` command line they show parses, and README's Python runs.

- Every code span or block in README.md, clusters/README.md and the agents'
  READMEs that invokes `rlplat` names a real command, and every `--flag` in
  that invocation is one of that command's flags (from the CLI's own parser,
  i.e. what `--help` lists).
- Every ```python block of README.md runs to the end in a fresh interpreter.
"""

import glob
import os
import re
import subprocess
import sys

import pytest

from rlplat.launch import cli

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS = ["README.md", "clusters/README.md", *sorted(
    os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, "agents", "*", "README.md")))]

_FENCE = re.compile(r"```(\w*)\n(.*?)```", re.S)
_SPAN = re.compile(r"`([^`\n]+)`")
_INVOCATION = re.compile(r"(?:^|\s|/)rlplat ((?:[a-z][a-z0-9-]*)(?: [a-z][a-z0-9-]*)?)(.*)")


def _load(folder, module):
    """A module of the repository's ``folder`` (bench/, docs/: scripts, not packages)."""
    import importlib  # pylint: disable=g-import-not-at-top

    path = os.path.join(REPO, folder)
    sys.path.insert(0, path)
    try:
        return importlib.import_module(module)
    finally:
        sys.path.remove(path)


def _subparsers(parser):
    for action in parser._actions:  # pylint: disable=protected-access
        if action.__class__.__name__ == "_SubParsersAction":
            return action.choices
    return {}


def _commands():
    """{"train d4pg": {flags}, "status": {flags}, ...} from the real parser."""
    out = {}

    def walk(parser, path):
        subs = _subparsers(parser)
        flags = {s for a in parser._actions for s in a.option_strings}  # pylint: disable=protected-access
        if path:
            out[" ".join(path)] = flags
        for name, sub in subs.items():
            walk(sub, path + [name])

    walk(cli.build_parser(), [])
    return out


def _code(text):
    """Code blocks (other than python) and inline spans, as lines."""
    blocks = [body for lang, body in _FENCE.findall(text) if lang != "python"]
    prose = _FENCE.sub("", text)
    lines = [line for body in blocks for line in body.splitlines()]
    return lines + _SPAN.findall(prose)


def _invocations():
    found = []
    for doc in DOCS:
        with open(os.path.join(REPO, doc)) as f:
            text = f.read()
        for snippet in _code(text):
            for match in _INVOCATION.finditer(snippet):
                found.append((doc, match.group(1), snippet))
    return found


def test_every_rlplat_command_line_in_the_docs_parses():
    commands = _commands()
    problems, checked = [], 0
    for doc, words, snippet in _invocations():
        path = next((p for p in (words, words.split(" ")[0]) if p in commands), None)
        if path is None:
            problems.append(f"{doc}: `rlplat {words}` is no command (in: {snippet})")
            continue
        # Flags of this invocation: up to a shell separator.
        tail = re.split(r"&&|;|\|\s", snippet[snippet.index("rlplat " + words):])[0]
        for flag in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", tail):
            checked += 1
            # `rlplat train ... --address`: a flag of the group is one some subcommand has.
            known = commands[path] | {f for p, fs in commands.items() if p.startswith(path + " ")
                                      for f in fs}
            if flag not in known:
                problems.append(f"{doc}: `rlplat {path}` has no {flag} (in: {snippet})")
    assert not problems, "\n".join(problems)
    assert checked >= 30  # the docs do show flags: this test must not pass by finding none


def test_the_docs_name_every_command():
    shown = {words.split(" ")[0] for _, words, _ in _invocations()}
    top = {path.split(" ")[0] for path in _commands()}
    assert top <= shown, f"commands the docs never show: {sorted(top - shown)}"


@pytest.mark.slow
def test_readme_python_snippets_run(tmp_path):
    with open(os.path.join(REPO, "README.md")) as f:
        blocks = [body for lang, body in _FENCE.findall(f.read()) if lang == "python"]
    assert blocks
    for i, body in enumerate(blocks):
        path = tmp_path / f"snippet{i}.py"
        path.write_text(body)
        env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2")
        result = subprocess.run([sys.executable, str(path)], cwd=str(tmp_path), env=env,
                                capture_output=True, text=True, timeout=300, check=False)
        assert result.returncode == 0, f"README python block {i} failed:\n{body}\n{result.stderr[-3000:]}"


def test_bench_index_is_generated_from_the_current_results_and_lists_every_bench():
    bench = os.path.join(REPO, "bench")
    bench_index = _load("bench", "bench_index")
    with open(bench_index.INDEX, encoding="utf-8") as f:
        assert f.read() == bench_index.render(), "bench/README.md is stale: run python bench/bench_index.py"
    # A bench is a module that writes a result: every one is indexed (helpers are not benches).
    helpers = {"bench_index", "learning_table", "seeds", "cpu_accounting", "learner_precision",
               "learner_roofline_torch", "throughput_kit", "throughput_report", "cli_runs", "first_call"}
    modules = {os.path.splitext(os.path.basename(p))[0] for p in glob.glob(os.path.join(bench, "*.py"))}
    assert modules - helpers == set(bench_index.BENCHES)


def test_architecture_diagram_names_real_code_and_was_redrawn_from_its_source():
    import importlib  # pylint: disable=g-import-not-at-top

    architecture = _load("docs", "architecture")
    for name, (_, code, _, _, _) in architecture.BOXES.items():
        module, attribute = code.split(":")
        assert hasattr(importlib.import_module(module), attribute), f"box {name}: no {code}"
    for start, end, _ in architecture.ARROWS:
        assert start in architecture.BOXES and end in architecture.BOXES
    assert architecture.recorded_hash() == architecture.source_hash(), (
        "docs/architecture.png is stale: run python docs/architecture.py")
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        assert "](docs/architecture.png)" in f.read()


def test_cli_reference_lists_every_command_and_flag_as_the_parser_does_now():
    cli_reference = _load("docs", "cli_reference")
    text = cli_reference.render()
    with open(cli_reference.PAGE, encoding="utf-8") as f:
        assert f.read() == text, "docs/cli.md is stale: run python docs/cli_reference.py"
    for path, flags in _commands().items():
        if any(other.startswith(path + " ") for other in _commands()):
            continue  # a group (`train`, `sweep`): its commands are listed
        section = text.split(f"## `rlplat {path}`", 1)[1].split("\n## ", 1)[0]
        missing = sorted(f for f in flags if f not in section)
        assert not missing, f"rlplat {path}: flags missing from docs/cli.md: {missing}"
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        assert "](docs/cli.md)" in f.read()
