"""docs/architecture.md matches the code: its import rules hold, its package table is complete."""

import ast
import os
import re

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC = os.path.join(REPO, "docs", "architecture.md")


def _doc() -> str:
    with open(DOC, encoding="utf-8") as f:
        return f.read()


def _rules_block() -> list:
    block = re.search(r"## Import rules.*?```text\n(.*?)```", _doc(), re.S)
    assert block, "docs/architecture.md has no ```text block under '## Import rules'"
    return [line.strip() for line in block.group(1).splitlines() if line.strip()]


# The folders agents/ and envs/ install under these package names (setup.py).
PACKAGE_OF_FOLDER = {"agents": "rlplat_agents", "envs": "rlplat_envs"}
FOLDER_OF_PACKAGE = {package: folder for folder, package in PACKAGE_OF_FOLDER.items()}


def _module_name(path: str) -> str:
    parts = os.path.relpath(path, REPO)[:-3].split(os.sep)
    parts[0] = PACKAGE_OF_FOLDER.get(parts[0], parts[0])
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: str) -> set:
    """Every absolute module an import statement in ``path`` names, at any depth."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:  # `from rlplat import core` imports the module rlplat.core
                top, *rest = node.module.split(".")
                folder = os.path.join(REPO, FOLDER_OF_PACKAGE.get(top, top), *rest, alias.name)
                is_module = os.path.exists(folder + ".py") or os.path.isdir(folder)
                names.add(f"{node.module}.{alias.name}" if is_module else node.module)
    return names


def import_table(roots=("rlplat", "agents", "envs")) -> dict:
    """module -> the modules it imports, for every source file under ``roots``."""
    table = {}
    for root in roots:
        for folder, _, files in os.walk(os.path.join(REPO, root)):
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    table[_module_name(path)] = _imports(path)
    return table


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _agent(module: str):
    parts = module.split(".")
    return parts[1] if parts[0] == "rlplat_agents" and len(parts) > 1 else None


def violations(table: dict, rules: list) -> list:
    """The imports in ``table`` that break ``rules`` (the doc's lines), as 'module -> target: rule'."""
    found = []
    for rule in rules:
        if m := re.fullmatch(r"(\S+) must not import (.+)", rule):
            source, rest = m.group(1), m.group(2)
            targets, _, exceptions = rest.partition(", except ")
            allowed = {tuple(e.split(" -> ")) for e in exceptions.split(", ") if " -> " in e}
            if source == "rlplat_agents.<one>":
                for module, imported in table.items():
                    for target in imported:
                        if (_agent(module) and _agent(target) and _agent(target) != _agent(module)
                                and not any(_within(module, a) and _within(target, b) for a, b in allowed)):
                            found.append(f"{module} -> {target}: {rule}")
                continue
            banned = [t.strip() for t in targets.split(",")]
            for module, imported in table.items():
                if _within(module, source):
                    found += [f"{module} -> {t}: {rule}" for t in sorted(imported)
                              if any(_within(t, b) for b in banned)]
        elif m := re.fullmatch(r"(\S+) is imported only by (.+)", rule):
            target, owners = m.group(1), [o.strip() for o in m.group(2).split(",")]
            for module, imported in table.items():
                if not any(_within(module, o) for o in owners):
                    found += [f"{module} -> {t}: {rule}" for t in sorted(imported) if _within(t, target)]
        else:
            pytest.fail(f"docs/architecture.md: cannot read the import rule {rule!r}")
    return sorted(set(found))


def test_the_import_rules_in_the_doc_hold_for_every_import():
    rules = _rules_block()
    assert len(rules) >= 5
    assert violations(import_table(), rules) == []


def test_a_broken_rule_is_reported():
    """The checker itself: an agent import inside rlplat and a stray Ray import are both caught."""
    table = {"rlplat.launch.cli": {"rlplat_agents.d4pg.config"}, "rlplat.replay.server": {"ray"},
             "rlplat_agents.gan.train": {"rlplat_agents.supervised.data"},
             "rlplat_agents.gan.x": {"rlplat_agents.impala.losses"},
             "rlplat.distributed.driver": {"ray"}}
    assert violations(table, _rules_block()) == [
        "rlplat.launch.cli -> rlplat_agents.d4pg.config: rlplat must not import rlplat_agents",
        "rlplat.replay.server -> ray: ray is imported only by rlplat.distributed, rlplat.runners, rlplat.clusters",
        "rlplat_agents.gan.x -> rlplat_agents.impala.losses: "
        "rlplat_agents.<one> must not import rlplat_agents.<another>, "
        "except rlplat_agents.gan -> rlplat_agents.supervised.data, rlplat_agents.bc -> rlplat_agents.d4pg.networks",
    ]


def test_every_rlplat_package_and_module_is_in_the_package_table():
    doc = _doc()
    listed = set(re.findall(r"^\| `([^`]+)` \|", doc, re.M))
    present = set()
    for name in os.listdir(os.path.join(REPO, "rlplat")):
        path = os.path.join(REPO, "rlplat", name)
        if os.path.isdir(path) and os.path.exists(os.path.join(path, "__init__.py")):
            present.add(f"rlplat/{name}/")
        elif name.endswith(".py") and name != "__init__.py":
            present.add(f"rlplat/{name}")
    assert present - listed == set(), "add these to the Packages table of docs/architecture.md"
    assert {"agents/<name>/", "envs/"} <= listed


def import_cycles(table: dict) -> list:
    """Every group of first-party modules that import each other in a circle, lazy imports included."""
    graph = {m: sorted(t for t in imported if t in table and t != m) for m, imported in table.items()}
    index, low, on_stack, stack, cycles = {}, {}, set(), [], []

    def visit(node):  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(cycles)


def test_no_module_imports_itself_through_others():
    assert import_cycles(import_table()) == []


def test_a_cycle_through_a_lazy_import_is_found():
    table = {"rlplat.a": {"rlplat.b"}, "rlplat.b": {"rlplat.c", "numpy"}, "rlplat.c": {"rlplat.a"},
             "rlplat.d": {"rlplat.a"}}
    assert import_cycles(table) == [["rlplat.a", "rlplat.b", "rlplat.c"]]


def _path_stops() -> list:
    block = re.search(r"## The path of `rlplat train d4pg`.*?```path\n(.*?)```", _doc(), re.S)
    assert block, "docs/architecture.md has no ```path block under '## The path of `rlplat train d4pg`'"
    return [line.split()[0] for line in block.group(1).splitlines() if line.strip()]


def _resolve(stop: str):
    import importlib

    module, _, qualname = stop.partition(":")
    target = importlib.import_module(module)
    for part in qualname.split("."):
        target = getattr(target, part)
    return target


def test_the_path_to_the_first_learner_step_is_short_and_real():
    import inspect

    stops = _path_stops()
    assert 2 <= len(stops) <= 11, f"{len(stops) - 1} hops; the doc promises at most 10"
    assert stops[0] == "rlplat.launch.cli:main" and stops[-1].endswith(".step")
    for here, there in zip(stops, stops[1:]):
        source = inspect.getsource(_resolve(here))  # fails when a stop no longer exists
        callee = there.rpartition(".")[2].rpartition(":")[2]
        assert re.search(rf"\b{re.escape(callee)}\b", source), f"{here} does not call {there}"


def test_a_path_stop_that_is_gone_fails_the_check():
    with pytest.raises(AttributeError):
        _resolve("rlplat.launch.rl_run:no_such_hop")
