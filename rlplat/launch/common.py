"""Pieces shared by the command modules: errors, parser, config flags, TF set-up.

Exit codes: 0 success, 1 failure during a run (with a traceback), 2 usage
error (one line on stderr: ``rlplat: error: <what to fix>``), 130 Ctrl-C.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from typing import Any, Dict, Iterable, Mapping, NoReturn, Optional

from rlplat import run_dir
from rlplat import seeding

EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class UsageError(Exception):
    """A bad flag or value; the message is one line that names the fix."""


class Parser(argparse.ArgumentParser):
    """argparse, with errors on ONE line: ``rlplat: error: <message> (see <prog> --help)``."""

    def error(self, message: str) -> NoReturn:
        fail(f"{message} (see `{self.prog} --help`)")


def flag_name(field: str) -> str:
    """The command-line flag of a config field: ``min_replay_size`` -> ``--min-replay-size``."""
    return "--" + field.replace("_", "-")


def fail(message: str) -> NoReturn:
    """Prints a one-line usage error and exits with code 2."""
    sys.stderr.write(f"rlplat: error: {message}\n")
    sys.exit(EXIT_USAGE)


# ----------------------------------------------------------------- subcommands
def add_subcommands(parser: argparse.ArgumentParser, module_names: Iterable[str],
                    title: str, dest: str) -> None:
    """One sub-parser per command module (``NAME``, ``HELP``, ``add_arguments``, ``run``)."""
    import importlib  # pylint: disable=g-import-not-at-top

    subparsers = parser.add_subparsers(title=title, dest=dest, metavar=dest.upper(), required=True)
    for module_name in module_names:
        module = importlib.import_module(module_name)
        sub = subparsers.add_parser(module.NAME, help=module.HELP, description=module.HELP)
        module.add_arguments(sub)
        sub.set_defaults(run=module.run)


# ------------------------------------------------------------------- run flags
def add_run_flags(parser: argparse.ArgumentParser, agent: str) -> None:
    """``--num-replicas``, ``--logdir``, ``--resume``, ``--progress``: every training command has them."""
    parser.add_argument("--num-replicas", type=int, default=None, metavar="N",
                        help="replicas on this machine (default: every GPU, or 1 on CPU, where N "
                             "replicas are N logical CPU devices)")
    parser.add_argument("--logdir", default=None, metavar="DIR",
                        help=f"run directory (default: runs/{agent}-<timestamp>); required with --resume")
    parser.add_argument("--resume", action="store_true",
                        help="continue the run in --logdir from its newest checkpoint")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="show a progress bar (default: only on a terminal)")


MAX_SEED = seeding.MAX_SEED


def check_run_flags(args: argparse.Namespace, agent: str) -> str:
    """Validates the run flags of an in-process run; returns the run directory."""
    if args.num_replicas is not None and args.num_replicas < 1:
        raise UsageError(f"--num-replicas must be >= 1 (got {args.num_replicas}); pass 1 or more")
    return run_logdir(args.logdir, args.resume, agent)


def run_logdir(logdir: Optional[str], resume: bool, agent: str) -> str:
    """``--logdir``, or a new run's default name; ``--resume`` needs it given."""
    if resume and not logdir:
        raise UsageError("--resume needs --logdir DIR naming the run to continue "
                         f"(e.g. --logdir runs/{agent}-20260101-120000)")
    return logdir or run_dir.default_name(agent)


def as_flags(message: str, names: Iterable[str], renamed: Optional[Mapping[str, str]] = None) -> str:
    """``message`` with each field name in ``names`` spelled as its flag.

    Library objects raise in their own field names; this is the one place
    the command line turns them into flags (``n_step`` -> ``--n-step``, or
    ``renamed[name]`` where the flag is not the field's name).
    """
    flags = {name: flag_name(name) for name in names}
    flags.update(renamed or {})
    if not flags:
        return message
    pattern = r"(?<![-\w])(" + "|".join(sorted(map(re.escape, flags), key=len, reverse=True)) + r")\b"
    return re.sub(pattern, lambda m: flags[m.group(1)], message)


# ------------------------------------------------------------- placement flags
PLACEMENT_FLAGS = ("actor_resources", "learner_resources", "actor_cpus", "learner_cpus")


def add_placement_flags(parser: argparse.ArgumentParser) -> None:
    """Where each role runs on a Ray cluster: ``--actor-resources`` and friends.

    Defaults (None) let the run decide: actors ask for ``actor=1`` and the
    learner for ``learner=1`` when some node of the cluster offers those
    custom resources (clusters/*.yaml do), and for none on a plain local Ray.
    """
    group = parser.add_argument_group("placement (Ray cluster)")
    group.add_argument("--actor-resources", type=_resources, default=None, metavar="NAME=AMOUNT[,...]",
                       help="custom Ray resources each actor asks for, e.g. actor=1 (default: actor=1 "
                            "when a node offers `actor`, else none; 'none' for none)")
    group.add_argument("--learner-resources", type=_resources, default=None, metavar="NAME=AMOUNT[,...]",
                       help="custom Ray resources of the learner; a separate replay server runs on the "
                            "learner's node (default: learner=1 when a node offers `learner`, else none; "
                            "'none' for none)")
    group.add_argument("--actor-cpus", type=float, default=None, metavar="CPUS",
                       help="CPUs per actor (default: the actor nodes' CPUs split evenly, at most 1)")
    group.add_argument("--learner-cpus", type=float, default=None, metavar="CPUS",
                       help="CPUs of the learner, or of each learner worker (default: 1 per replica, "
                            "at most half the cluster, split between learner workers; "
                            "1 with GPUs)")


def placement_from_args(args: argparse.Namespace) -> Dict[str, Any]:
    """``RayLayoutConfig`` keyword arguments for the placement flags that were given."""
    return {name: getattr(args, name) for name in PLACEMENT_FLAGS if getattr(args, name, None) is not None}


def _resources(text: str) -> Dict[str, float]:
    """``"actor=1,fast_net=0.5"`` -> ``{"actor": 1.0, "fast_net": 0.5}``; ``"none"`` -> ``{}``."""
    if text.strip().lower() in ("", "none"):
        return {}
    out: Dict[str, float] = {}
    for part in text.split(","):
        name, sep, amount = part.strip().partition("=")
        try:
            value = float(amount)
        except ValueError:
            value = None
        if not sep or not name.strip() or value is None:
            raise argparse.ArgumentTypeError(
                f"expected NAME=AMOUNT[,NAME=AMOUNT] like actor=1, or 'none'; got {text!r}")
        if not 0 < value < float("inf"):
            raise argparse.ArgumentTypeError(f"{name.strip()} must be > 0 (got {amount.strip()}); "
                                             "leave a resource out rather than asking for 0 of it")
        out[name.strip()] = value
    return out


# ---------------------------------------------------------------- config flags
def add_config_flags(parser: argparse.ArgumentParser, config_cls: type,
                     helps: Mapping[str, str]) -> None:
    """One ``--field-name`` flag per config field in ``helps`` (name -> help text).

    Flags default to None, meaning "the config's own default" (shown in --help).
    """
    fields = {f.name: f for f in dataclasses.fields(config_cls)}
    for name, text in helps.items():
        field = fields[name]
        default = field.default
        if isinstance(default, tuple):
            kind, shown = _int_list, ",".join(str(x) for x in default)
        elif isinstance(default, bool):
            parser.add_argument("--" + name.replace("_", "-"), dest=name, default=None,
                                action=argparse.BooleanOptionalAction, help=f"{text} (default: {default})")
            continue
        else:
            kind, shown = field.metadata.get("kind", type(default)), default
        shown = field.metadata.get("shown", shown)
        parser.add_argument("--" + name.replace("_", "-"), dest=name, type=kind, default=None,
                            metavar=name.split("_")[-1].upper(), help=f"{text} (default: {shown})")


def config_from_args(config_cls: type, args: argparse.Namespace, names: Iterable[str]) -> Any:
    """Builds the frozen config from the flags given; bad values become a UsageError."""
    overrides: Dict[str, Any] = {n: getattr(args, n) for n in names if getattr(args, n) is not None}
    try:
        return config_cls(**overrides)
    except ValueError as e:  # the config speaks in its field names
        raise UsageError(as_flags(str(e), [f.name for f in dataclasses.fields(config_cls)])) from None


def _int_list(text: str) -> tuple:
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers like 256,128, got {text!r}") from None


# -------------------------------------------------------------------- TF set-up
def looks_like_host_port(address: str) -> bool:
    """True for ``HOST:PORT`` with a port in 1..65535 (``--address``)."""
    host, sep, port = address.rpartition(":")
    return bool(sep and host and port.isdigit() and 0 < int(port) < 65536)


def setup_tensorflow(num_replicas: Optional[int]) -> None:
    """Threads and logical CPU devices for ``num_replicas``, before TF runs any op."""
    from rlplat.utils import tf_setup  # pylint: disable=g-import-not-at-top

    try:
        tf_setup.configure_tensorflow(num_cpu_replicas=num_replicas)
    except ValueError as e:  # ReplicationError: too late, or an impossible device count
        raise UsageError(str(e)) from None


def config_value(config_cls: type, field: str, text: str, where: str) -> Any:
    """``text`` as the config's own ``--field`` flag would parse it; ``where`` names the flag giving it."""
    default = next(f.default for f in dataclasses.fields(config_cls) if f.name == field)
    if isinstance(default, bool):
        if text.lower() not in ("true", "false"):
            raise UsageError(f"{where} {field}={text}: use true or false")
        return text.lower() == "true"
    parser = Parser(prog=f"{where} {field}")
    add_config_flags(parser, config_cls, {field: ""})
    return getattr(parser.parse_args(["--" + field.replace("_", "-"), text]), field)
