"""The GAN's training: the shared controller over steps in chunks, logs, sample grids and MMD, checkpoints, resume.

Run directory: ``config.json``/``run_info.json``, ``metrics.jsonl``,
``tb/learner`` (losses), ``tb/evaluator`` (``mmd`` against held-out digits
and a ``samples`` image: a grid of digits generated from fixed noise, so
the grids over steps show the generator improving), ``checkpoints/``.
The data order and the noise are functions of the seed and the step, so a
resumed run continues the same streams.
"""

from __future__ import annotations

import time
from typing import Any, Dict, Optional

import numpy as np
import tqdm

from rlplat_agents.gan import learning
from rlplat_agents.gan.config import GANConfig
from rlplat_agents.supervised import data
from rlplat import controller
from rlplat import precision
from rlplat import replication
from rlplat import run_dir
from rlplat.utils import checkpointing
from rlplat.utils import loggers
from rlplat.utils import run_info

NUM_EVAL_SAMPLES = 500
NUM_GRID_SAMPLES = 16


def evaluate(learner: learning.GANLearner, held_out: np.ndarray, bandwidth: float) -> Dict[str, float]:
    """MMD between ``NUM_EVAL_SAMPLES`` generated digits and the held-out ones (lower is better)."""
    samples = learner.sample(NUM_EVAL_SAMPLES)
    return {"mmd": learning.mmd(samples, held_out, bandwidth)}


def _bandwidth(x: np.ndarray) -> float:
    """The median pairwise distance of the held-out digits: the RBF scale of the MMD."""
    flat = x.reshape(len(x), -1)
    d = np.sqrt(np.maximum((flat ** 2).sum(1)[:, None] + (flat ** 2).sum(1)[None] - 2 * flat @ flat.T, 0))
    return float(np.median(d[np.triu_indices(len(flat), 1)]))


def train(config: GANConfig, num_replicas: Optional[int], logdir: str, resume: bool = False,
          progress: Optional[bool] = None, debug_eager: bool = False) -> Dict[str, Any]:
    """Trains (or resumes) up to ``config.num_steps``; returns ``{"step", "mmd", "initial_mmd", ...}``."""
    started = time.time()
    repl = replication.make_replicator(num_replicas=num_replicas, eager=debug_eager)
    learner = learning.GANLearner(config, repl)
    checkpointer = checkpointing.Checkpointer(
        run_dir.checkpoints_dir(logdir), is_chief=repl.is_chief,
        max_to_keep=config.max_checkpoints_to_keep, **learner.checkpointables())
    restore_step = run_dir.start_step(logdir, resume)
    start_step = 0 if restore_step is None else checkpointer.restore(restore_step)
    if repl.is_chief:
        print(learner.precision.line(precision.agent_label(config)), flush=True)  # as the RL runs print it
        run_info.write_run_info(logdir, config.to_dict(), extra={
            "num_replicas": repl.num_replicas, "resumed_from_step": start_step if resume else None,
            "precision": learner.precision.to_dict()})
    _, held_out = data.load_splits(config.seed, config.held_out_fraction)
    held_out_x = held_out.x.reshape(-1, 8, 8)
    bandwidth = _bandwidth(held_out_x)

    def make_logger(role: str) -> loggers.MetricsLogger:
        return loggers.make_logger(logdir, role, purge_after_step=start_step if resume else None,
                                   tensorboard=repl.is_chief, jsonl=repl.is_chief)

    learner_log, eval_log = make_logger("learner"), make_logger("evaluator")
    learner_log.write_text("config", loggers.config_markdown(
        {**config.to_dict(), "num_replicas": repl.num_replicas}), step=start_step)

    def log_samples(step: int) -> Dict[str, float]:
        result = evaluate(learner, held_out_x, bandwidth)
        eval_log.write(step, result)
        eval_log.write_image("samples", learning.sample_grid(learner.sample(NUM_GRID_SAMPLES)), step)
        return result

    initial = log_samples(start_step) if not resume else None
    bar = tqdm.tqdm(total=config.num_steps, initial=start_step, unit="step", dynamic_ncols=True,
                    disable=None if progress is None else not progress, desc="gan")
    holder: Dict[str, Any] = {}

    def train_chunk(n: int) -> Dict[str, float]:
        metrics = learner.train(holder["batches"], n)
        bar.update(n)
        return metrics

    def sample_and_score() -> Dict[str, float]:
        scores = log_samples(learner.step)
        tqdm.tqdm.write(f"step {learner.step}: MMD to held-out digits {scores['mmd']:.4f}")
        return scores

    run = controller.StepProgram(
        steps=lambda: learner.step, train=train_chunk, evaluate=sample_and_score,
        checkpoint=lambda: checkpointer.save(learner.step),
        report=lambda step, metrics, n, seconds: learner_log.write(step, {**metrics, "steps_per_second": n / seconds}),
        steps_per_loop=config.steps_per_loop, saved_step=start_step if resume else None)
    try:
        if start_step < config.num_steps:
            holder["batches"] = repl.distribute(data.make_input_fn(config.global_batch_size, config.seed,
                                                                   start_step=start_step,
                                                                   held_out_fraction=config.held_out_fraction))
            run.run(config.num_steps, eval_every_steps=config.sample_period,
                    checkpoint_every_steps=config.checkpoint_period, report_every_steps=config.log_period)
        result = run.last_eval or initial or evaluate(learner, held_out_x, bandwidth)
    except KeyboardInterrupt:
        if learner.step != run.saved_step:
            checkpointer.save(learner.step)
        raise
    finally:
        bar.close()
        learner_log.close()
        eval_log.close()
    return {"step": learner.step, "mmd": result["mmd"],
            "initial_mmd": initial["mmd"] if initial else None,
            "seconds": time.time() - started, "logdir": logdir}
