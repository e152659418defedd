"""BC clones a real, trained D4PG teacher to >= 80% of its greedy return; shuffled actions do not.

The teacher is trained here (``bc_testlib.train_teacher``: ``run_local`` on
cartpole:balance_sparse until its greedy policy holds the pole) and saved as a
run directory, which BC reads as it would read any ``rlplat train d4pg`` run.
Teacher, student and the zero-action baseline are measured on the same
episodes (environment seed ``SEED + 1``, which ``run_offline`` evaluates on),
and the baseline must lie below the bar, so an untrained teacher or a
do-nothing student cannot pass. No timing is asserted.

The student learns from the default ``BCConfig``, whose teacher rollouts are
noised (``rollout_noise``): from greedy rollouts alone, a student of a
teacher that just cleared its bar can fit the rows and still fall off the
pole on new episodes (bench/bc_rollout_noise.py measures how often, over
teacher and student seeds).
"""

import dataclasses

import numpy as np
import pytest

import bc_testlib
from rlplat_agents.bc.builder import BCBuilder
from rlplat_agents.bc.config import BCConfig
from rlplat.offline import run_offline

SEED = 0
EPISODES = 10
BAR = 0.8  # of the teacher's mean greedy return
STUDENT_STEPS = 3000  # measured: 1000-2000 steps reach the teacher's return on seeds 0-2


def _constant_action_return(value, seed, num_episodes):
    environment = bc_testlib.make_environment(seed)
    try:
        returns = []
        for _ in range(num_episodes):
            timestep, total = environment.reset(), 0.0
            while not timestep.last():
                timestep = environment.step(np.full(environment.action_spec().shape, value, np.float32))
                total += timestep.reward
            returns.append(total)
        return float(np.mean(returns))
    finally:
        environment.close()


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    logdir = str(tmp_path_factory.mktemp("bc") / "teacher")
    trained = bc_testlib.train_teacher(logdir, seed=SEED)
    returns = bc_testlib.greedy_returns(logdir, EPISODES, SEED + 1)
    zero = _constant_action_return(0.0, SEED + 1, EPISODES)
    print(f"\nteacher: {trained}; greedy returns {np.round(returns)} (mean {np.mean(returns):.1f}); "
          f"zero action {zero:.1f}")
    assert BAR * np.mean(returns) > zero, (f"the teacher is not trained: {BAR:g} x its return "
                                           f"{np.mean(returns):.1f} does not beat a zero action's {zero:.1f}")
    return logdir, float(np.mean(returns))


@dataclasses.dataclass(frozen=True)
class _ShuffledBC(BCBuilder):
    """BC on the teacher's observations with its actions shuffled across rows: nothing to clone."""

    def make_dataset(self, environment_factory, seed):
        dataset = super().make_dataset(environment_factory, seed)
        return {**dataset, "action": np.random.default_rng(seed).permutation(dataset["action"])}


def _clone(builder_class, teacher_logdir):
    # One evaluation, at the end: it is the one the tests read (bench/bc_rollout_noise.py keeps the curve).
    out = run_offline(builder_class(BCConfig(teacher_logdir=teacher_logdir)), bc_testlib.make_environment,
                      STUDENT_STEPS, eval_episodes=EPISODES, seed=SEED)
    print(f"\n{builder_class.__name__}: evaluations {out['evaluations']}, last loss {out['metrics']['loss']:.3g}, "
          f"{out['dataset_size']} rows")
    assert out["learner_steps"] == STUDENT_STEPS and out["dataset_size"] == 10 * 1000  # 10 whole episodes
    assert [step for step, _ in out["evaluations"]] == [STUDENT_STEPS]
    return out["evaluations"][-1][1]


@pytest.mark.slow
def test_bc_reaches_80_percent_of_the_teachers_greedy_return(teacher):
    logdir, teacher_return = teacher
    student = _clone(BCBuilder, logdir)
    assert student >= BAR * teacher_return, f"student {student:.1f} < {BAR:g} x teacher {teacher_return:.1f}"


@pytest.mark.slow
def test_bc_on_shuffled_actions_stays_below_the_bar(teacher):
    """The negative control: the same data with its action column shuffled must not pass."""
    logdir, teacher_return = teacher
    student = _clone(_ShuffledBC, logdir)
    assert student < BAR * teacher_return, f"shuffled student {student:.1f} >= {BAR:g} x {teacher_return:.1f}"
