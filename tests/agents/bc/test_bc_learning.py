"""BC learner: its loss against a NumPy reference, 2 replicas against 1, the NaN guard, a checkpoint."""

import numpy as np
import pytest
import tensorflow as tf
from dm_env import specs

from rlplat_agents.bc.builder import BCBuilder
from rlplat_agents.bc.config import BCConfig
from rlplat import replication
from rlplat.specs import EnvironmentSpec
from rlplat.utils import numpy_layers

OBS, ACT = 5, 2
SPEC = EnvironmentSpec(
    observations=specs.Array((OBS,), np.float32, "observations"),
    actions=specs.BoundedArray((ACT,), np.float32, -1.0, 1.0, "actions"),
    rewards=specs.Array((), np.float32), discounts=specs.BoundedArray((), np.float32, 0.0, 1.0))


def _dataset(rows, seed=0):
    """A teacher's (observation, action) rows: actions a smooth function of observations, in (-1, 1)."""
    rng = np.random.default_rng(seed)
    observation = rng.normal(size=(rows, OBS)).astype(np.float32)
    action = np.tanh(observation @ rng.normal(size=(OBS, ACT))).astype(np.float32)
    return {"observation": observation, "action": action}


def _learner(dataset, num_replicas, **changes):
    config = BCConfig(teacher_logdir="unused", layer_sizes=(16, 16), **changes)
    return BCBuilder(config).make_learner(SPEC, replication.make_replicator(num_replicas), dataset, seed=3)


def _numpy_loss(policy, dataset):
    """The mean squared error of the policy's actions, by NumPy (``numpy_layers.forward``) on every row."""
    predicted, _ = numpy_layers.forward(numpy_layers.export_layers(policy.layers), dataset["observation"])
    return float(np.mean(np.square(predicted.astype(np.float64) - dataset["action"])))


@pytest.mark.parametrize("num_replicas", [1, 2])
def test_loss_is_the_mean_squared_error_of_a_numpy_reference(num_replicas):
    # One global batch holds every row (in a new order each step), so each step's loss, taken
    # before its update, is the MSE over the whole data set at the weights the step starts from;
    # with 2 replicas it is the mean of the two halves' means, which is the same.
    data = _dataset(32)
    learner = _learner(data, num_replicas, global_batch_size=32, steps_per_call=1)
    losses = []
    for _ in range(4):
        expected = _numpy_loss(learner.policy, data)
        losses.append(learner.step()["loss"])
        np.testing.assert_allclose(losses[-1], expected, rtol=1e-5)
    assert learner.num_steps == 4 and losses[-1] < losses[0]  # the steps did fit the actions


def _state(learner):
    return ([v.numpy() for v in learner.policy.variables]
            + [np.asarray(v.numpy()) for v in learner.optimizer.variables])


@pytest.mark.slow
def test_two_replicas_train_exactly_like_one():
    """Same weights and the same Adam state (moments, iterations): per-replica means averaged by all-reduce."""
    data = _dataset(64)
    one = _learner(data, 1, global_batch_size=16, steps_per_call=4)
    two = _learner(data, 2, global_batch_size=16, steps_per_call=4)
    for src, dst in zip(one.policy.variables, two.policy.variables):
        dst.assign(src.numpy())
    initial = _state(one)
    m1 = [one.step() for _ in range(3)]
    m2 = [two.step() for _ in range(3)]
    assert one.num_steps == two.num_steps == 12
    assert len(_state(one)) == len(_state(two)) > len(one.policy.variables) + 1  # Adam's slots are compared
    for a, b in zip(_state(one), _state(two)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose([m["loss"] for m in m1], [m["loss"] for m in m2], rtol=1e-5)
    assert not np.allclose(_state(one)[0], initial[0])  # the steps did move the weights


@pytest.mark.slow
def test_a_non_finite_row_stops_the_step_and_names_the_fix():
    data = _dataset(16)
    data["action"][5, 1] = np.nan
    learner = _learner(data, 1, global_batch_size=16, steps_per_call=3)
    before = [v.numpy() for v in learner.policy.variables]
    with pytest.raises(FloatingPointError, match=r"^BC: non-finite loss and gradient at learner step 1; .*"
                                                 r"lower --learning-rate or check the data set$"):
        learner.step()
    for a, b in zip(before, [v.numpy() for v in learner.policy.variables]):
        np.testing.assert_array_equal(a, b)


def test_checkpoint_holds_the_policy_the_builder_can_restore_alone(tmp_path):
    """A BC checkpoint's ``policy`` is D4PG's policy network: rebuilt from the config, its weights restore."""
    from rlplat_agents.d4pg import networks
    from rlplat.utils import checkpointing

    learner = _learner(_dataset(16), 1, global_batch_size=16, steps_per_call=2)
    learner.step()
    path = checkpointing.Checkpointer(str(tmp_path), **learner.checkpointables()).save(learner.num_steps)
    policy = networks.make_policy_network(ACT, (16, 16))
    policy(tf.zeros((1, OBS)))
    tf.train.Checkpoint(policy=policy).read(path).expect_partial().assert_existing_objects_matched()
    for a, b in zip(learner.policy.variables, policy.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert path.endswith("ckpt-2")
