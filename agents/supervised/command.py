"""``rlplat train supervised``: the digits classifier on the replication core."""

from __future__ import annotations

import argparse

from rlplat_agents.supervised.config import SupervisedConfig  # light: no TensorFlow
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
    in_process.add_arguments(parser, AGENT, SupervisedConfig, CONFIG_FLAGS)


def run(args: argparse.Namespace) -> int:
    # Everything that can be a usage error is checked before TensorFlow
    # starts (flags, --logdir, --resume against the run's config.json);
    # devices are configured before any op runs.
    config = common.config_from_args(SupervisedConfig, args, CONFIG_FLAGS)
    return in_process.run_in_process(args, AGENT, config, SHAPE_FIELDS, _train)


def _train(args: argparse.Namespace, config: SupervisedConfig, logdir: str) -> int:
    def load_train():
        from rlplat_agents.supervised import train  # pylint: disable=g-import-not-at-top  (imports TF)

        return train

    return in_process.train(args, config, logdir, load_train, lambda summary: (
        f"done: step {summary['step']}, held-out accuracy {summary['held_out_accuracy']:.4f}, "
        f"{summary['seconds']:.1f} s; logs in {logdir}"))
