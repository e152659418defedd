"""``rlplat train supervised``: the digits classifier on the replication core."""

from __future__ import annotations

import argparse
import sys

from agents.supervised.config import SupervisedConfig  # light: no TensorFlow
from rlplat.launch import common
from rlplat.launch import in_process

NAME = "supervised"
HELP = "train the digits classifier (scikit-learn digits, sync batch norm) on N replicas"
AGENT = "supervised"
CONFIG_CLASS = SupervisedConfig
CONFIG_FLAGS = {
    "num_steps": "total gradient steps (a resumed run stops here too)",
    "global_batch_size": "examples per step over all replicas",
    "learning_rate": "Adam learning rate",
    "seed": "fixes the data split, data order and initial weights",
    "hidden_sizes": "widths of the Dense-BatchNorm-ReLU blocks, comma-separated",
    "log_period": "steps between training-metric log lines",
    "eval_period": "steps between held-out evaluations",
    "checkpoint_period": "steps between checkpoints",
    "synchronized_batch_norm": "batch-norm statistics over the global batch (else per replica)",
}
# Config fields that decide the checkpoint's variables: `--resume` may not change them.
SHAPE_FIELDS = ("hidden_sizes",)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common.add_run_flags(parser, AGENT)
    common.add_config_flags(parser, SupervisedConfig, CONFIG_FLAGS)
    parser.add_argument("--debug-eager", action="store_true",
                        help="run each step eagerly on one device through the same step function, "
                             "so a breakpoint() in it stops in this terminal; slow, for development")


def run(args: argparse.Namespace) -> int:
    # Everything that can be a usage error is checked before TensorFlow
    # starts (flags, --logdir, --resume against the run's config.json);
    # devices are configured before any op runs.
    config = common.config_from_args(SupervisedConfig, args, CONFIG_FLAGS)
    return in_process.run_in_process(args, AGENT, config, SHAPE_FIELDS, _train)


def _train(args: argparse.Namespace, config: SupervisedConfig, logdir: str) -> int:
    common.setup_tensorflow(args.num_replicas)
    from agents.supervised import train  # pylint: disable=g-import-not-at-top  (imports TF)
    from rlplat.replication import ReplicationError  # pylint: disable=g-import-not-at-top

    print(f"{'resuming' if args.resume else 'run'} in {logdir}", flush=True)
    try:
        summary = train.train(config, args.num_replicas, logdir, resume=args.resume, progress=args.progress,
                              debug_eager=args.debug_eager)
    except ReplicationError as e:  # a device/cluster setting, found while building the strategy
        raise common.UsageError(str(e)) from None
    except FloatingPointError as e:  # the NaN guard stopped the run; the weights are still finite
        sys.stderr.write(f"rlplat: error: {e}; logs and checkpoints in {logdir}\n")
        return common.EXIT_FAILURE
    print(f"done: step {summary['step']}, held-out accuracy {summary['held_out_accuracy']:.4f}, "
          f"{summary['seconds']:.1f} s; logs in {logdir}", flush=True)
    return common.EXIT_OK
