"""Data types stored in and sampled from replay."""

from __future__ import annotations

from typing import Any, NamedTuple


class Transition(NamedTuple):
    """One (possibly n-step) transition, as written by the adders.

    Learners form the bootstrapped target as
    ``reward + discount * V(next_observation)``: ``discount`` already contains
    the agent's ``gamma ** n`` and the product of the environment discounts, so
    it must NOT be multiplied by gamma again. ``discount == 0`` means the episode
    terminated inside the n-step window (no bootstrap).

    Attributes:
      observation: Observation at which ``action`` was taken.
      action: Action taken at ``observation``.
      reward: Discounted sum of the next (up to) n rewards.
      discount: Total discount to apply to the value of ``next_observation``.
      next_observation: Observation n steps later (or the episode's final one).
    """

    observation: Any
    action: Any
    reward: Any
    discount: Any
    next_observation: Any
