"""``rlplat export --logdir RUN -o DIR``: a run's greedy policy as a SavedModel that runs without rlplat.

    rlplat export --logdir runs/d4pg-20260101-120000 -o policy/
    python -c "import tensorflow as tf; m = tf.saved_model.load('policy'); print(m(obs))"

Restores the run's policy as ``rlplat eval`` does (newest checkpoint through
the state file, or ``--checkpoint N``; the builder ``run_info.json`` names,
with its recorded config; only the acting network's weights), and writes
``rlplat.export``'s SavedModel and ``policy.json`` into DIR. No Ray.

Every flag, the run directory, its checkpoint, whether the agent's policy can
be exported (IMPALA's LSTM core cannot) and the output directory are checked
before TensorFlow is imported; each bad input is one line on stderr, exit 2.
"""

from __future__ import annotations

import argparse

from rlplat.launch import common, saved_run

NAME = "export"
HELP = "write a run's greedy policy as a TensorFlow SavedModel (+ policy.json) that runs without rlplat"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    saved_run.add_flags(parser, "export")
    parser.add_argument("-o", "--output", required=True, metavar="DIR",
                        help="where the SavedModel and policy.json go: a new or empty directory")


def run(args: argparse.Namespace) -> int:
    from rlplat import evaluation  # pylint: disable=g-import-not-at-top  (no TF)
    from rlplat import export  # pylint: disable=g-import-not-at-top  (no TF until called)

    run = saved_run.open_run(args)
    record, step, prefix, builder = run.record, run.step, run.prefix, run.builder
    try:
        builder.check_export()
    except ValueError as e:  # check_export: this config's policy cannot be served
        raise common.UsageError(f"cannot export {args.logdir}: {e}") from None
    try:
        staging = export.prepare_output(args.output)  # last check: it creates the staging folder
    except export.ExportError as e:
        raise common.UsageError(str(e)) from None

    try:
        directory = _export(evaluation, export, record, builder, step, prefix, staging)
        export.finish(staging, args.output)
    except BaseException:
        export.discard(staging)
        raise
    print(f"exported {record.builder}'s greedy policy on {record.env}, checkpoint ckpt-{step} "
          f"(learner step {step}), to {args.output}", flush=True)
    size, action = directory["observation"]["size"], directory["action"]
    print(f"  signature '{export.SIGNATURE}': {export.INPUT_NAME} float32 [{size}] or [B, {size}] -> "
          f"{export.OUTPUT_NAME} {action['dtype']} {action['shape']} (or [B, ...])", flush=True)
    print(f"  layout and action spec: {args.output}/{export.POLICY_JSON}", flush=True)
    return common.EXIT_OK


def _export(evaluation, export, record, builder, step: int, prefix: str, staging: str) -> dict:
    """Restores the policy and writes the export into ``staging``; returns policy.json's content."""
    from rlplat.utils import tf_setup  # pylint: disable=g-import-not-at-top

    tf_setup.import_tensorflow()  # every input checked: now pay for TensorFlow
    import rlplat_envs as envs  # pylint: disable=g-import-not-at-top  (dm_control; sets MUJOCO_GL first)
    from rlplat import specs  # pylint: disable=g-import-not-at-top

    # Seed 0: the environment is only read for its specs and wrapper stack.
    environment = envs.make_environment(record.env, seed=0, **dict(record.env_kwargs))
    try:
        spec = specs.make_environment_spec(environment)
        try:
            objects, _ = evaluation.restore_policy_network(builder, spec, prefix)
        except evaluation.RunError as e:
            raise common.UsageError(str(e)) from None
        act = builder.make_greedy_policy(objects, spec)
        module = export.build_module(act, objects, environment)
        description = {"agent": record.agent, "builder": record.builder,
                       "checkpoint": {"logdir": record.logdir, "step": step},
                       **export.describe(environment, record.env, record.env_kwargs)}
        export.write(module, description, staging)
    finally:
        environment.close()
    return description
