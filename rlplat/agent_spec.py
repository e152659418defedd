"""An agent's declaration, made once in its own package, and the registry that finds it.

An agent tells rlplat everything the command line, ``--resume``, ``eval`` and
``status`` need in one frozen ``AgentSpec``: its name and help, its config
dataclass, where its builder (agents trained by actors on Ray) or its
training function (agents trained in the rlplat process) lives, which config
fields fix the network's shapes and the replay table, and an optional check
of its config against the run. The spec names modules as strings, so
declaring one imports neither TensorFlow nor Reverb.

The registry reads the ``rlplat.agents`` entry points of the installed
distributions::

    [project.entry-points."rlplat.agents"]
    d4pg = "rlplat_agents.d4pg.spec:SPEC"

so adding an agent edits nothing inside ``rlplat/``, and no list of agents is
written by hand anywhere else.
"""

from __future__ import annotations

import dataclasses
import importlib
from importlib import metadata
from typing import Any, Callable, Dict, FrozenSet, Optional, Tuple, Union

from rlplat import config_fields

GROUP = "rlplat.agents"


class NoAgentsError(RuntimeError):
    """No agent is registered (rlplat is not installed as a distribution), or a registration is broken."""


@dataclasses.dataclass(frozen=True)
class RunFacts:
    """What an agent's ``check`` may weigh its config against, known before anything starts."""

    env: str = ""
    num_actors: int = 1
    envs_per_actor: int = 1
    given: FrozenSet[str] = frozenset()  # config fields the user set explicitly


@dataclasses.dataclass(frozen=True)
class AgentSpec:
    """Everything rlplat needs to offer, run, resume and evaluate one agent.

    Attributes:
      name: the sub-command (``rlplat train NAME``) and the name runs record.
      help: one line for ``rlplat train --help``.
      config_class: the agent's frozen config dataclass; each field declared
        with ``config_fields.field`` becomes a flag.
      builder: ``"module:Class"`` of its ``core.AgentBuilder`` (actors on Ray),
        built as ``Class(config=config)``.
      train: the module whose ``train(config, num_replicas, logdir, ...)``
        trains it in the rlplat process (no actors). Exactly one of
        ``builder`` and ``train`` is set.
      default_env: the task a run gets without ``--env`` (Ray agents).
      env_help: what ``--env`` takes, for ``--help``.
      continuous_actions: the agent cannot act in a discrete action space.
      shape_fields: config fields that decide the checkpoint's variables (a
        resume may not change them), or a function of the config giving them.
      replay_fields: config fields the replay table and its rate limiter are
        built from (a resume that restores replay may not change them).
      replay_checkpoint: False when the agent keeps no replay worth saving;
        ``replay_checkpoint_refusal`` then says why.
      check: ``check(config, facts) -> config`` weighs the config against the
        run (``RunFacts``) before anything starts, and may fill defaults that
        depend on it. It raises ``ValueError`` in the config's field names.
      describe: the final line of an in-process run, from its summary.
    """

    name: str
    help: str
    config_class: type
    builder: str = ""
    train: str = ""
    default_env: str = "cartpole:swingup"
    env_help: str = "control-suite task DOMAIN:TASK"
    continuous_actions: bool = False
    shape_fields: Union[Tuple[str, ...], Callable[[Any], Tuple[str, ...]]] = ()
    replay_fields: Tuple[str, ...] = ()
    replay_checkpoint: bool = True
    replay_checkpoint_refusal: str = ""
    check: Optional[Callable[[Any, RunFacts], Any]] = None
    describe: Optional[Callable[[Dict[str, Any]], str]] = None

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise ValueError(f"AgentSpec name must be an identifier (got {self.name!r})")
        if bool(self.builder) == bool(self.train):
            raise ValueError(f"agent {self.name!r}: set exactly one of builder (actors on Ray) and train "
                             "(in the rlplat process)")
        if self.builder and ":" not in self.builder:
            raise ValueError(f"agent {self.name!r}: builder must be 'module:Class' (got {self.builder!r})")
        if not dataclasses.is_dataclass(self.config_class):
            raise ValueError(f"agent {self.name!r}: config_class must be a dataclass")
        names = {f.name for f in dataclasses.fields(self.config_class)}
        listed = self.replay_fields + (() if callable(self.shape_fields) else tuple(self.shape_fields))
        unknown = [n for n in listed if n not in names]
        if unknown:
            raise ValueError(f"agent {self.name!r}: {unknown} are not fields of {self.config_class.__name__}")

    @property
    def on_ray(self) -> bool:
        """Trained by actors on Ray (a builder), rather than in the rlplat process."""
        return bool(self.builder)

    @property
    def builder_class_name(self) -> str:
        """The builder's class name, as ``run_info.json`` records it (runs from before agents were recorded)."""
        return self.builder.rpartition(":")[2]

    def flag_helps(self) -> Dict[str, str]:
        """Config field -> help text, for every field that is a flag."""
        return config_fields.flag_helps(self.config_class)

    def shapes(self, config: Any) -> Tuple[str, ...]:
        """The shape fields of ``config``."""
        return tuple(self.shape_fields(config) if callable(self.shape_fields) else self.shape_fields)

    def checked(self, config: Any, facts: RunFacts) -> Any:
        """``config`` after the agent's ``check`` (itself when there is none)."""
        return config if self.check is None else self.check(config, facts)

    def builder_class(self) -> type:
        """The builder class (imports the agent's builder module; no TensorFlow at module level)."""
        module, _, name = self.builder.partition(":")
        return getattr(importlib.import_module(module), name)

    def make_builder(self, config: Any) -> Any:
        """A builder holding ``config``."""
        return self.builder_class()(config=config)

    def train_module(self) -> Any:
        """The in-process agent's training module (it imports TensorFlow)."""
        return importlib.import_module(self.train)


def specs() -> Dict[str, AgentSpec]:
    """Every registered agent's spec, by name, sorted.

    Raises:
      NoAgentsError: none registered, or an entry point that is not an
        ``AgentSpec`` of its own name.
    """
    found: Dict[str, AgentSpec] = {}
    for entry in metadata.entry_points(group=GROUP):
        try:
            spec = entry.load()
        except (ImportError, AttributeError) as e:
            raise NoAgentsError(f"agent {entry.name!r} is registered as {entry.value!r}, which does not load "
                                f"({e}); reinstall it (`pip install -e .`)") from None
        if not isinstance(spec, AgentSpec) or spec.name != entry.name:
            raise NoAgentsError(f"agent {entry.name!r} is registered as {entry.value!r}, which is not an "
                                f"AgentSpec named {entry.name!r}")
        found[entry.name] = spec
    if not found:
        raise NoAgentsError(f"no agents are registered under the {GROUP!r} entry points; install rlplat "
                            "with `pip install -e .` (scripts/setup.sh does)")
    return dict(sorted(found.items()))


def spec(name: str) -> AgentSpec:
    """The spec of agent ``name``.

    Raises:
      KeyError: no agent of that name is registered.
    """
    return specs()[name]


def agent_of_builder(builder: Any) -> str:
    """The registered agent whose builder class ``builder`` is an instance of ("" when none is)."""
    cls = type(builder)
    for name, candidate in specs().items():
        module, _, class_name = candidate.builder.partition(":")
        if candidate.on_ray and class_name == cls.__name__ and module == cls.__module__:
            return name
    return ""


def agent_of_record(run_info: Dict[str, Any]) -> Optional[str]:
    """The agent a run's ``run_info.json`` records: its ``agent``, else its builder's class name; or None.

    Runs written before agents were recorded name only their builder class,
    which exactly one registered agent declares.
    """
    agent = run_info.get("agent")
    if isinstance(agent, str) and agent:
        return agent
    builder = run_info.get("builder")
    for name, candidate in specs().items():
        if candidate.on_ray and builder == candidate.builder_class_name:
            return name
    return None
