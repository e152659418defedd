"""Runs an exported policy on its control-suite task with TensorFlow, NumPy and dm_control only.

    python exported_policy_rollout.py EXPORT_DIR --seed S --episodes N --out rollout.json [--observations OBS.npz]

What a user of ``rlplat export`` would write: read ``policy.json``, build the
task with dm_control (seeded as ``rlplat eval --seed S`` seeds it), flatten
each observation as the layout says, call the SavedModel, and step the bare
environment with its actions. Writes every episode's return and actions, and
the modules loaded, to ``--out``; with ``--observations``, also the actions
for each array of observations in that file (one batched call per array).
``tests/launch/test_export.py`` runs it in a fresh process: rlplat must never
be imported here.
"""

import argparse
import json
import os
import sys

os.environ.setdefault("MUJOCO_GL", "osmesa")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from dm_control import suite  # noqa: E402


def flat_observation(observation, layout):
    """The float32 vector the policy takes: each named part raveled, in the layout's order."""
    return np.concatenate([np.asarray(observation[part["name"]], np.float32).reshape(-1)
                           for part in layout["parts"]])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("export_dir")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--episodes", type=int, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--observations", default=None)
    args = parser.parse_args()

    with open(os.path.join(args.export_dir, "policy.json"), encoding="utf-8") as f:
        policy_json = json.load(f)
    environment = policy_json["environment"]
    if environment["kwargs"]:
        raise SystemExit(f"this script runs tasks without env kwargs, not {environment['kwargs']}")
    domain, task = environment["name"].split(":")
    env = suite.load(domain, task, task_kwargs={"random": args.seed})
    model = tf.saved_model.load(args.export_dir)
    serve = model.signatures[policy_json["signature"]["name"]]

    returns, actions, batch_gaps = [], [], []
    for _ in range(args.episodes):
        timestep = env.reset()
        episode_return, episode_actions = 0.0, []
        while not timestep.last():
            obs = flat_observation(timestep.observation, policy_json["observation"])
            action = model(tf.constant(obs)).numpy()  # one observation in, one action out
            if not episode_actions:  # the signature, on a batch of two, agrees
                batch = serve(observations=tf.constant(np.stack([obs, obs])))["actions"].numpy()
                batch_gaps.append(float(np.max(np.abs(batch - action[None]))))
            episode_actions.append(action.tolist())
            timestep = env.step(action)
            # rlplat's environments hand rewards on as float32; its loop sums them as Python floats.
            episode_return += float(np.float32(timestep.reward or 0.0))
        returns.append(episode_return)
        actions.append(episode_actions)

    replayed = {}
    if args.observations:
        with np.load(args.observations) as arrays:
            replayed = {name: serve(observations=tf.constant(arrays[name]))["actions"].numpy().tolist()
                        for name in arrays.files}

    result = {"returns": returns, "replayed_actions": replayed, "actions": actions, "batch_gaps": batch_gaps,
              "action_dtype": str(action.dtype),
              "rlplat_modules": sorted(m for m in sys.modules if m.split(".")[0].startswith("rlplat"))}
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
