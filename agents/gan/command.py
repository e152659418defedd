"""``rlplat train gan``: a spectral-norm GAN on the digits, two models in one replicated step."""

from __future__ import annotations

import argparse

from rlplat_agents.gan.config import GANConfig  # light: no TensorFlow
from rlplat.launch import common
from rlplat.launch import in_process

NAME = "gan"
HELP = "train a spectral-norm GAN on the digits on N replicas (sample grids in TensorBoard)"
AGENT = "gan"
CONFIG_CLASS = GANConfig
CONFIG_FLAGS = {
    "num_steps": "total steps (one discriminator and one generator update each)",
    "global_batch_size": "real images per step over all replicas",
    "noise_dim": "size of the generator's noise input",
    "generator_sizes": "generator MLP widths, comma-separated",
    "discriminator_sizes": "discriminator MLP widths, comma-separated",
    "generator_learning_rate": "Adam learning rate of the generator",
    "discriminator_learning_rate": "Adam learning rate of the discriminator",
    "spectral_norm": "spectral normalisation of the discriminator's layers",
    "seed": "fixes the data, the initial weights and the noise",
    "log_period": "steps between training-metric log lines",
    "sample_period": "steps between MMD evaluations and sample grids in TensorBoard",
    "checkpoint_period": "steps between checkpoints",
}
# Config fields that decide the checkpoint's variables: `--resume` may not change them.
SHAPE_FIELDS = ("noise_dim", "generator_sizes", "discriminator_sizes", "spectral_norm")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    in_process.add_arguments(parser, AGENT, GANConfig, CONFIG_FLAGS)


def run(args: argparse.Namespace) -> int:
    config = common.config_from_args(GANConfig, args, CONFIG_FLAGS)
    return in_process.run_in_process(args, AGENT, config, SHAPE_FIELDS, _train)


def _train(args: argparse.Namespace, config: GANConfig, logdir: str) -> int:
    def load_train():
        from rlplat_agents.gan import train  # pylint: disable=g-import-not-at-top  (imports TF)

        return train

    return in_process.train(args, config, logdir, load_train, lambda summary: (
        f"done: step {summary['step']}, MMD to held-out digits "
        f"{'' if summary['initial_mmd'] is None else format(summary['initial_mmd'], '.4f') + ' -> '}"
        f"{summary['mmd']:.4f}, {summary['seconds']:.1f} s; sample grids: tensorboard --logdir {logdir}/tb"))
