"""The builder half that deterministic-policy-gradient agents share: transition replay and Gaussian actors.

D4PG and DDPG differ in their critic and their learner; what they store and
how they act is the same. An n-step transition table, adder and input
pipeline (``rlplat.replay.transition_replay.TransitionReplay``), and actors
that run the policy network's own layers in NumPy and add Gaussian noise
(``rlplat.gaussian_actor``). ``DPGBuilder`` provides those factories, so an
agent's builder writes only ``make_networks`` and ``make_learner``.

Importing this module imports neither TensorFlow nor Reverb.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

from rlplat import core

if TYPE_CHECKING:  # annotations only
    import reverb

    from rlplat.replay.transition_replay import TransitionReplay
    from rlplat.specs import EnvironmentSpec


class DPGBuilder(core.AgentBuilder):
    """Replay and acting factories over ``self.config``.

    A subclass is a frozen dataclass whose ``config`` has the fields
    ``TransitionReplay.from_config`` reads (``n_step``, ``discount``,
    ``samples_per_insert``, ``min_replay_size``, ``max_replay_size``,
    ``global_batch_size``), plus ``sigma`` and ``variable_update_period``,
    and whose ``make_networks`` returns a ``"policy"`` network with actions in
    [-1, 1]. It may override ``replay`` (its table's name, packing) and
    ``actor_sigma`` (noise per actor).
    """

    config: Any

    def replay(self) -> TransitionReplay:
        """The replay kit; by default every setting from the config, items packed."""
        from rlplat.replay.transition_replay import TransitionReplay  # pylint: disable=g-import-not-at-top

        return TransitionReplay.from_config(self.config)

    def actor_sigma(self, actor_index: int) -> float:
        """Exploration std of actor ``actor_index``: the config's ``sigma`` for all."""
        del actor_index
        return float(self.config.sigma)

    def make_replay_tables(self, environment_spec: EnvironmentSpec, num_actors: int) -> List[reverb.Table]:
        return self.replay().make_tables(environment_spec, num_actors)

    def make_adder(self, replay_address: str, environment_spec: EnvironmentSpec) -> core.Adder:
        return self.replay().make_adder(replay_address, environment_spec)

    def make_input_fn(self, replay_address: str, environment_spec: EnvironmentSpec) -> core.InputFn:
        return self.replay().make_input_fn(replay_address, environment_spec)

    def make_policy_network(self, environment_spec: EnvironmentSpec) -> Tuple[Dict[str, Any], List[Any]]:
        """``{"policy": network}`` and its variables, as the learner checkpoints and serves them."""
        policy = self.make_networks(environment_spec)["policy"]
        return {"policy": policy}, list(policy.variables)

    def make_greedy_policy(self, objects: Dict[str, Any], environment_spec: EnvironmentSpec) -> Any:
        """The greedy ``GaussianActor``'s action in TensorFlow (``rlplat export``)."""
        del environment_spec  # the policy network is already shaped for it
        from rlplat.gaussian_actor import greedy_policy  # pylint: disable=g-import-not-at-top

        return greedy_policy(objects["policy"])

    def make_actor(self, environment_spec: EnvironmentSpec, variable_source: core.VariableSource,
                   adder: Optional[core.Adder], actor_index: int, seed: int, evaluation: bool = False) -> core.Actor:
        """A ``GaussianActor`` with ``actor_sigma(actor_index)``; greedy and adder-free when ``evaluation``."""
        from rlplat.gaussian_actor import GaussianActor  # pylint: disable=g-import-not-at-top

        return GaussianActor.for_policy(self.make_policy_network(environment_spec)[0]["policy"], variable_source,
                                        None if evaluation else adder, sigma=self.actor_sigma(actor_index),
                                        seed=seed, evaluation=evaluation,
                                        variable_update_period=self.config.variable_update_period)

    def make_vector_actor(self, environment_spec: EnvironmentSpec, variable_source: core.VariableSource,
                          replay_address: Optional[str], seeds: Sequence[int],
                          actor_indices: Optional[Sequence[int]] = None) -> Optional[Any]:
        """One ``GaussianVectorActor`` for ``len(seeds)`` environments (None when items are not packed).

        Environment k acts and records as ``make_actor``'s actor with
        ``seeds[k]`` and ``actor_indices[k]`` would, through a stream of its own.
        """
        replay = self.replay()
        if not replay.pack:
            return None
        from rlplat.gaussian_actor import GaussianVectorActor  # pylint: disable=g-import-not-at-top

        adder = replay.make_vector_adder(replay_address, environment_spec, len(seeds)) if replay_address else None
        indices = range(len(seeds)) if actor_indices is None else actor_indices
        return GaussianVectorActor.for_policy(self.make_policy_network(environment_spec)[0]["policy"], variable_source,
                                              adder, seeds, [self.actor_sigma(i) for i in indices],
                                              variable_update_period=self.config.variable_update_period)
