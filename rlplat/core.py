"""The platform's small interfaces. Nothing infrastructural lives here.

An agent is a set of these pieces; a layout (one process, or Ray) decides
where each runs. Ray, Reverb and TF never appear in these signatures, so the
same actor or learner runs under every layout and in unit tests.
"""

from __future__ import annotations

import abc
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Protocol, Sequence, Tuple

import dm_env
import numpy as np

if TYPE_CHECKING:  # names for annotations only: this module imports neither TF nor Reverb
    import reverb
    import tensorflow as tf

    from rlplat.replication import Replicator
    from rlplat.specs import EnvironmentSpec

Weights = Mapping[str, Sequence[np.ndarray]]
# strategy.distribute_datasets_from_function's argument: one pipeline's batches.
InputFn = Callable[["tf.distribute.InputContext"], "tf.data.Dataset"]
# An offline data set in host memory: named arrays sharing their leading axis
# (one row per example), e.g. {"observation": [N, O], "action": [N, A]}.
OfflineDataset = Mapping[str, np.ndarray]
# seed -> a fresh environment: what an agent may call to make one (``experiment.EnvironmentFactory``
# is the picklable, named kind every runner passes).
MakeEnvironment = Callable[[int], dm_env.Environment]


class Adder(Protocol):
    """Writes an actor's experience into replay, an episode at a time.

    ``add(action, next_timestep, ...)`` is the agent's own (its actor knows
    what extras go with a step); the layout needs only these.
    """

    def add_first(self, timestep: dm_env.TimeStep) -> None:
        """Starts an episode at its first timestep."""

    def reset(self) -> None:
        """Drops a partly written episode (after an environment fault)."""

    def flush(self) -> None:
        """Sends what is buffered to the server."""

    def close(self) -> None:
        """Flushes and releases the connection."""


class VariableSource(abc.ABC):
    """Something that serves versioned weights (a learner, or a handle to one)."""

    @abc.abstractmethod
    def get_variables(self, names: Sequence[str]) -> Tuple[int, Dict[str, Sequence[np.ndarray]]]:
        """Returns (version, {name: list of arrays}); version grows with every update."""


class Actor(abc.ABC):
    """Acts in an environment and reports what it saw (to an adder, usually)."""

    @abc.abstractmethod
    def select_action(self, observation: np.ndarray) -> np.ndarray:
        """The action for one observation."""

    @abc.abstractmethod
    def observe_first(self, timestep: dm_env.TimeStep) -> None:
        """Records the first timestep of an episode."""

    @abc.abstractmethod
    def observe(self, action: np.ndarray, next_timestep: dm_env.TimeStep) -> None:
        """Records an action and the timestep it led to."""

    @abc.abstractmethod
    def update(self, wait: bool = False) -> None:
        """Pulls fresh weights from the variable source when they are due."""

    @property
    def policy_version(self) -> int:
        """The version of the weights this actor acts with (-1 before any)."""
        return -1


class Learner(VariableSource):
    """Takes gradient steps; serves its weights to actors."""

    @abc.abstractmethod
    def step(self) -> Dict[str, float]:
        """One (or a few) learner steps; returns metrics."""

    @property
    @abc.abstractmethod
    def num_steps(self) -> int:
        """Learner steps taken so far, across restarts."""

    def trace(self) -> None:
        """Prepares the first ``step`` (e.g. traces it) without taking one; by default nothing.

        A layout calls it while the learner would otherwise wait for its first
        batch, so that wait and the trace overlap.
        """

    @abc.abstractmethod
    def checkpointables(self) -> Dict[str, Any]:
        """The trackable state a checkpoint saves and restores, by name.

        Networks, optimizers (slots included) and step counters: everything a
        resumed run needs to continue as if it had not stopped. The layout
        passes these to ``tf.train.Checkpoint(**...)``; ``make_policy_network``
        returns the policy's key(s) of this same mapping.
        """


class AgentBuilder(abc.ABC):
    """Everything agent-specific, as factories a layout can call in any process.

    A builder holds only its frozen config, so it pickles cheaply and crosses
    process boundaries; layouts (one process, or Ray) call these factories
    where each piece runs. Reverb tables and addresses appear here because
    what to store is the agent's business; where the server runs is not.
    """

    @abc.abstractmethod
    def make_replay_tables(self, environment_spec: EnvironmentSpec, num_actors: int) -> List[reverb.Table]:
        """The Reverb tables (rate limiters validated for `num_actors`)."""

    @abc.abstractmethod
    def make_adder(self, replay_address: str, environment_spec: EnvironmentSpec) -> Adder:
        """The object an actor writes experience through."""

    @abc.abstractmethod
    def make_input_fn(self, replay_address: str, environment_spec: EnvironmentSpec) -> InputFn:
        """The learner's dataset: per-replica batches sampled from ``replay_address``.

        ``make_learner`` distributes it (``replicator.distribute``); each input
        pipeline sizes its batches from the ``InputContext`` it is given.
        """

    @abc.abstractmethod
    def make_learner(self, environment_spec: EnvironmentSpec, replicator: Replicator, replay_address: str,
                     logdir: Optional[str] = None) -> Learner:
        """The learner, its variables created under `replicator.scope()`."""

    @abc.abstractmethod
    def make_actor(self, environment_spec: EnvironmentSpec, variable_source: VariableSource,
                   adder: Optional[Adder], actor_index: int, seed: int, evaluation: bool = False) -> Actor:
        """An actor; `evaluation=True` means greedy and no adder."""

    @abc.abstractmethod
    def make_networks(self, environment_spec: EnvironmentSpec) -> Dict[str, Any]:
        """The agent's networks by name, built (every variable created), untrained.

        The learner makes its online (and target) copies with it, under its
        replicator's scope; ``make_policy_network`` picks the acting one.
        """

    def make_vector_actor(self, environment_spec: EnvironmentSpec, variable_source: VariableSource,
                          replay_address: Optional[str], seeds: Sequence[int],
                          actor_indices: Optional[Sequence[int]] = None) -> Optional[Any]:
        """Optional: one ``rlplat.vector_loop.VectorActor`` for ``len(seeds)`` environments, or None.

        It must act and record as ``make_actor``'s actors with these seeds
        and ``actor_indices`` (None: 0..K-1) would, each environment its own
        replay stream (``replay_address`` None: record nothing). None (the
        default) makes the caller use one ``make_actor`` actor and adder per
        environment.
        """
        del environment_spec, variable_source, replay_address, seeds, actor_indices
        return None

    def make_policy_network(self, environment_spec: EnvironmentSpec) -> Tuple[Dict[str, Any], List[Any]]:
        """The acting network alone, built, for restoring a checkpoint's policy (``rlplat eval``).

        Returns ``(objects, variables)``: ``objects`` maps the learner's
        ``checkpointables()`` key(s) to the network(s), so a checkpoint holding
        ``**objects`` restores exactly them (no critic, no optimizer); and
        ``variables`` are what the learner serves as ``"policy"``, in its order.
        """
        raise NotImplementedError(f"{type(self).__name__} cannot build its policy network alone")

    def check_export(self) -> None:
        """Refuses, before TensorFlow loads, a config whose greedy policy ``rlplat export`` cannot serve.

        Raises:
          ValueError: one line naming the fix. The default refuses a builder
            that does not define ``make_greedy_policy``; agents add their own
            cases (a recurrent core, say) and import nothing here.
        """
        if type(self).make_greedy_policy is AgentBuilder.make_greedy_policy:
            raise ValueError(f"{type(self).__name__} defines no greedy policy to export "
                             "(AgentBuilder.make_greedy_policy); export a run of another agent")

    def make_greedy_policy(self, objects: Dict[str, Any], environment_spec: EnvironmentSpec
                           ) -> Callable[[Any], Any]:
        """Optional: the evaluation actor's choice of action as TensorFlow ops (``rlplat export``).

        Args:
          objects: ``make_policy_network``'s objects, weights restored.
          environment_spec: the spec the agent acts on (canonical actions).

        Returns:
          A function of observations [B, O] (a float32 tf.Tensor) that gives
          what ``make_actor(..., evaluation=True)`` hands the environment: float32
          actions [B, A] in the agent's action space (e.g. [-1, 1]), or int32
          indices [B] for a ``DiscreteArray``. The same layers, squash and
          clip as the actor, so a SavedModel of it acts as ``rlplat eval`` does.
        """
        raise NotImplementedError(f"{type(self).__name__} has no greedy policy in TensorFlow")


class OfflineBuilder(abc.ABC):
    """An agent that learns from a fixed data set: no replay server, no acting while it learns.

    The offline counterpart of ``AgentBuilder``, with the same rules: a builder
    holds only its frozen config (it pickles cheaply), and these factories
    make everything with a thread, a file or a TF variable where it is used.
    ``rlplat.offline.run_offline`` calls them in this order: ``make_dataset``
    once, ``make_learner`` (which feeds itself through ``make_input_fn``),
    then ``make_actor`` for greedy evaluation episodes. Learners are the same
    ``Learner`` as online ones (``step``, ``num_steps``, ``checkpointables``,
    serving ``"policy"``), so checkpoints and actors work unchanged.
    """

    @abc.abstractmethod
    def make_dataset(self, environment_factory: MakeEnvironment, seed: int) -> OfflineDataset:
        """The data set, in host memory (it may need the environment, e.g. to roll out a teacher)."""

    @abc.abstractmethod
    def make_input_fn(self, dataset: OfflineDataset, seed: int) -> InputFn:
        """Per-replica batches of ``dataset``, sized from the ``InputContext``, in an order fixed by ``seed``.

        Consecutive per-replica batches make up one global batch, so a global
        step sees the same examples whatever the number of replicas.
        """

    @abc.abstractmethod
    def make_learner(self, environment_spec: EnvironmentSpec, replicator: Replicator,
                     dataset: OfflineDataset, seed: int) -> Learner:
        """The learner, its variables created under ``replicator.scope()``, fed from ``dataset``."""

    @abc.abstractmethod
    def make_actor(self, environment_spec: EnvironmentSpec, variable_source: VariableSource,
                   seed: int) -> Actor:
        """A greedy actor (no exploration, no adder) acting with ``variable_source``'s ``"policy"``."""

    def make_policy_network(self, environment_spec: EnvironmentSpec) -> Tuple[Dict[str, Any], List[Any]]:
        """As ``AgentBuilder.make_policy_network``: the acting network alone, for restoring a checkpoint."""
        raise NotImplementedError(f"{type(self).__name__} cannot build its policy network alone")



class WeightPuller(abc.ABC):
    """Pulls policy weights from a ``VariableSource`` and keeps their version.

    Weights are pulled before the first action (waiting, with a timeout, so no
    random policy ever acts) and then every ``variable_update_period``
    observed steps. Subclasses call ``_count_step()`` when they observe a step
    and implement ``_load_policy``; the base keeps the version bookkeeping.
    ``PullingActor`` is the usual user; actors for several environments at
    once (``rlplat.vector_loop.VectorActor``) use it alone.
    """

    def __init__(self, variable_source: VariableSource, variable_update_period: int,
                 wait_timeout_s: float):
        if variable_update_period < 1:
            raise ValueError(f"variable_update_period must be >= 1 (got {variable_update_period})")
        self._source = variable_source
        self._period = int(variable_update_period)
        self._wait_timeout_s = float(wait_timeout_s)
        self._version = -1
        self._since_update = 0

    @abc.abstractmethod
    def _load_policy(self, arrays: Sequence[np.ndarray]) -> None:
        """Replaces the acting policy's weights (``policy.variables`` order)."""

    @property
    def policy_version(self) -> int:
        return self._version

    def bind_source(self, variable_source: VariableSource) -> None:
        """Pulls from ``variable_source`` from now on.

        For an actor built in one process and used in another: an evaluator
        receives its actor from the learner, which has the agent's networks
        to derive the NumPy policy from, and binds it to its own source.
        """
        self._source = variable_source

    def _count_step(self) -> None:
        self._since_update += 1

    def update(self, wait: bool = False) -> None:
        """Pulls weights if due (every ``variable_update_period`` steps) or if ``wait``.

        ``wait=True`` (and the first action) block until the source serves
        weights, raising ``TimeoutError`` after ``wait_timeout_s``. An actor
        that already has weights keeps them when the source has none to give.
        """
        if not wait and self._since_update < self._period and self._version >= 0:
            return
        self._since_update = 0
        deadline = time.monotonic() + self._wait_timeout_s
        while True:
            version, weights = self._source.get_variables(["policy"])
            arrays = (weights or {}).get("policy")
            if version >= 0 and arrays:
                break
            if not wait and self._version >= 0:
                return  # Keep acting with what we have.
            if time.monotonic() >= deadline:
                raise TimeoutError(f"actor got no policy weights within {self._wait_timeout_s:g}s "
                                   f"(last version {version}); is the learner running?")
            time.sleep(0.05)
        if version != self._version:
            self._load_policy(arrays)
            self._version = int(version)


class PullingActor(WeightPuller, Actor):
    """An ``Actor`` that pulls its policy weights from a ``VariableSource`` (see ``WeightPuller``).

    Subclasses call ``_count_step()`` in ``observe`` and implement ``_load_policy``;
    they record through ``self._adder`` (None records nothing).
    """

    _adder: Any = None

    def bind_adder(self, adder: Any) -> None:
        """Records through ``adder`` from now on: an actor built in another process (``bind_source``)."""
        self._adder = adder
