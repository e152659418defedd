"""EnvPool's control-suite tasks against dm_control: same start state and actions give the same observations?

EnvPool is not one of the project's dependencies, so this bench installs it
(with the project's pins of dm-control, MuJoCo, NumPy and protobuf) into a
scratch virtualenv of its own (``--venv``) and runs the comparison there:

- equivalence: EnvPool and dm_control stepped side by side from the same
  physics state with the same random actions, the largest observation and
  reward difference after 1..200 steps. Only where EnvPool's observation
  determines the whole physics state (cartpole: slider, hinge and their
  velocities) can dm_control be put into EnvPool's start state; for the
  other tasks the start state is not exposed, and the bench says so
  instead of guessing;
- speed (indicative; take it on a quiet machine): env steps/s of one
  dm_control environment, one EnvPool environment, and 8 EnvPool
  environments stepped as one batch on one thread.

    python bench/envpool_eval.py                # writes bench/results/envpool_eval.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import seeds as seeds_lib  # noqa: E402  pylint: disable=g-import-not-at-top,wrong-import-position

PACKAGES = ["envpool==0.8.4", "dm-control==1.0.50", "mujoco==3.17.0", "numpy<2", "protobuf<5"]
TASKS = {"cartpole:swingup": "CartpoleSwingup-v1", "cartpole:balance": "CartpoleBalance-v1",
         "cheetah:run": "CheetahRun-v1", "walker:walk": "WalkerWalk-v1"}

# Runs inside the scratch virtualenv; prints one JSON list.
_INNER = r'''
import json, sys, time
import numpy as np
import envpool
from dm_control import suite

TASKS = json.loads(sys.argv[1])


def flat(values):
    return np.concatenate([np.ravel(np.asarray(v, np.float64)) for v in values])


def rate(step, n):
    t0 = time.perf_counter()
    for _ in range(n):
        step()
    return n / (time.perf_counter() - t0)


out = []
for task, name in TASKS.items():
    domain, task_name = task.split(":")
    pool = envpool.make_dm(name, num_envs=1, seed=0)
    ts = pool.reset()
    env = suite.load(domain, task_name, task_kwargs={"random": 0})
    env.reset()
    keys_pool = [k for k in ts.observation._fields if k not in ("env_id", "players")]
    keys_dm = list(env.observation_spec().keys())
    record = {"task": task, "envpool_task": name, "same_observation_keys": keys_pool == keys_dm}
    if domain == "cartpole":
        position, velocity = np.asarray(ts.observation.position)[0], np.asarray(ts.observation.velocity)[0]
        with env.physics.reset_context():
            env.physics.named.data.qpos["slider"] = position[0]
            env.physics.named.data.qpos["hinge_1"] = np.arctan2(position[2], position[1])
            env.physics.named.data.qvel["slider"] = velocity[0]
            env.physics.named.data.qvel["hinge_1"] = velocity[1]
        rng = np.random.default_rng(0)
        obs_diff, reward_diff = [], []
        for _ in range(200):
            action = rng.uniform(-1, 1, size=(1,) + pool.action_spec().shape)
            ts, tdm = pool.step(action, np.array([0])), env.step(action[0])
            obs_diff.append(float(np.max(np.abs(flat([getattr(ts.observation, k)[0] for k in keys_pool])
                                                 - flat([tdm.observation[k] for k in keys_dm])))))
            reward_diff.append(abs(float(ts.reward[0]) - float(tdm.reward)))
        record["max_obs_diff_after_steps"] = {str(k): max(obs_diff[:k]) for k in (1, 10, 50, 200)}
        record["max_reward_diff"] = max(reward_diff)
    else:
        record["equivalence"] = "not measured: EnvPool's start state is not exposed by its observation"
    zero1 = np.zeros((1,) + pool.action_spec().shape)
    record["envpool_1_env_steps_per_s"] = rate(lambda: pool.step(zero1, np.array([0])), 2000)
    batch = envpool.make_dm(name, num_envs=8, batch_size=8, num_threads=1, seed=0)
    batch.reset()
    zero8, ids = np.zeros((8,) + batch.action_spec().shape), np.arange(8)
    record["envpool_8_envs_1_thread_steps_per_s"] = 8 * rate(lambda: batch.step(zero8, ids), 500)
    env.reset()
    zero = np.zeros(env.action_spec().shape)
    record["dm_control_steps_per_s"] = rate(lambda: env.step(zero).last() and env.reset(), 2000)
    out.append(record)
print(json.dumps(out))
'''


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", default=os.path.join("/tmp", "rlplat-envpool-venv"),
                        help="scratch virtualenv for EnvPool (created when missing)")
    parser.add_argument("--out", default=os.path.join(HERE, "results", "envpool_eval.json"))
    args = parser.parse_args()
    python = os.path.join(args.venv, "bin", "python")
    if not os.path.exists(python):
        subprocess.run([sys.executable, "-m", "venv", args.venv], check=True)
        subprocess.run([python, "-m", "pip", "install", "-q", *PACKAGES], check=True)
    env = dict(os.environ, MUJOCO_GL=os.environ.get("MUJOCO_GL", "osmesa"))
    done = subprocess.run([python, "-c", _INNER, json.dumps(TASKS)], env=env, capture_output=True, text=True,
                          timeout=1800, check=True)
    tasks = json.loads(done.stdout.strip().splitlines()[-1])
    report = {"benchmark": "envpool_eval", "command": "python bench/envpool_eval.py", "packages": PACKAGES,
              "machine": seeds_lib.machine(), "load_average": os.getloadavg(), "tasks": tasks}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1)
    for t in tasks:
        match = t.get("max_obs_diff_after_steps", {}).get("200", t.get("equivalence"))
        print(f"{t['task']}: obs diff after 200 steps {match}; steps/s dm_control "
              f"{t['dm_control_steps_per_s']:.0f}, envpool 1 env {t['envpool_1_env_steps_per_s']:.0f}, "
              f"8 envs {t['envpool_8_envs_1_thread_steps_per_s']:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
