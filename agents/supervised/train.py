"""The training loop: progress, metrics, evaluation, checkpoints and resume.

``train(config, num_replicas, logdir, resume)`` runs the shared outer loop
(``rlplat.controller.Controller``, as every RL run does) over a
``controller.StepProgram``; ``SupervisedLearner`` owns the step. Steps run in chunks
of at most ``config.steps_per_loop`` inside one ``tf.function`` call, cut so
that every log, eval and checkpoint step is a chunk boundary.

Run directory layout:

    <logdir>/config.json, run_info.json   what produced the run
    <logdir>/metrics.jsonl                one JSON object per log line, all roles
    <logdir>/tb/learner, tb/evaluator     TensorBoard event files, one writer per role
    <logdir>/checkpoints/ckpt-<step>.*    the newest ``max_checkpoints_to_keep``

Resume restores the newest checkpoint (weights, Adam state, step counter),
restarts the data stream at that step (it is a pure function of seed and
step), drops log lines written after that checkpoint, and appends from there:
no step is repeated or lost. Ctrl-C saves a checkpoint before leaving.
"""

from __future__ import annotations

import time
from typing import Any, Dict, Optional

import tqdm

from rlplat_agents.supervised import data
from rlplat_agents.supervised import learning
from rlplat_agents.supervised.config import SupervisedConfig
from rlplat import controller
from rlplat import precision
from rlplat import replication
from rlplat import run_dir
from rlplat.utils import checkpointing
from rlplat.utils import loggers
from rlplat.utils import run_info

def train(config: SupervisedConfig, num_replicas: Optional[int], logdir: str,
          resume: bool = False, progress: Optional[bool] = None,
          debug_eager: bool = False) -> Dict[str, Any]:
    """Trains (or resumes training) up to ``config.num_steps`` steps.

    Args:
      config: the hyperparameters.
      num_replicas: replicas on this machine (None: every GPU, or 1 on CPU).
        On CPU, N replicas need N logical devices configured before TF starts
        (``rlplat.utils.tf_setup.configure_tensorflow``).
      logdir: the run directory (see the module docstring).
      resume: continue from the newest checkpoint in ``logdir``.
      progress: show a progress bar; None shows it only on a terminal.
      debug_eager: run every step eagerly on one device, through the same
        ``step_fn`` (``make_replicator(eager=True)``): a ``breakpoint()`` in
        the step stops there.

    Returns:
      ``{"step", "held_out_accuracy", "held_out_loss", "seconds", "logdir"}``.
    """
    started = time.time()
    restore_step = run_dir.start_step(logdir, resume)
    repl = replication.make_replicator(num_replicas=num_replicas, eager=debug_eager)
    learner = learning.SupervisedLearner(config, repl)
    checkpointer = checkpointing.Checkpointer(
        run_dir.checkpoints_dir(logdir), is_chief=repl.is_chief,
        max_to_keep=config.max_checkpoints_to_keep, **learner.checkpointables())
    start_step = 0
    if restore_step is not None:
        start_step = checkpointer.restore(restore_step)
        if start_step != learner.step:
            raise RuntimeError(f"checkpoint ckpt-{start_step} holds step {learner.step}; the run "
                               "directory is damaged")
    if repl.is_chief:
        print(learner.precision.line(precision.agent_label(config)), flush=True)  # as the RL runs print it
        run_info.write_run_info(logdir, config.to_dict(), extra={
            "num_replicas": repl.num_replicas, "resumed_from_step": start_step if resume else None,
            "precision": learner.precision.to_dict()})

    def make_logger(role: str) -> loggers.MetricsLogger:
        # Only the chief writes; the other workers log nowhere.
        return loggers.make_logger(logdir, role, purge_after_step=start_step if resume else None,
                                   tensorboard=repl.is_chief, jsonl=repl.is_chief)

    learner_log, eval_log = make_logger("learner"), make_logger("evaluator")
    learner_log.write_text("config", loggers.config_markdown(
        {**config.to_dict(), "num_replicas": repl.num_replicas}), step=start_step)
    bar = tqdm.tqdm(total=config.num_steps, initial=start_step, unit="step", dynamic_ncols=True,
                    disable=None if progress is None else not progress, desc="supervised")
    holder: Dict[str, Any] = {}

    def train_chunk(n: int) -> Dict[str, float]:
        metrics = learner.train(holder["batches"], n)
        bar.update(n)
        bar.set_postfix(loss=f"{metrics['loss']:.4f}", acc=f"{metrics['accuracy']:.3f}", refresh=False)
        return metrics

    def evaluate() -> Dict[str, float]:
        held_out = learner.evaluate()
        eval_log.write(learner.step, {"held_out_" + k: v for k, v in held_out.items()})
        tqdm.tqdm.write(f"step {learner.step}: held-out accuracy {held_out['accuracy']:.4f} "
                        f"loss {held_out['loss']:.4f}")
        return held_out

    def report(step: int, metrics: Dict[str, float], n: int, seconds: float) -> None:
        learner_log.write(step, {**metrics, "steps_per_second": n / seconds,
                                 "examples_per_second": n * config.global_batch_size / seconds})

    run = controller.StepProgram(steps=lambda: learner.step, train=train_chunk, evaluate=evaluate,
                                 checkpoint=lambda: checkpointer.save(learner.step), report=report,
                                 steps_per_loop=config.steps_per_loop, saved_step=start_step if resume else None)
    try:
        if start_step < config.num_steps:
            holder["batches"] = repl.distribute(data.make_input_fn(
                config.global_batch_size, config.seed, start_step=start_step,
                held_out_fraction=config.held_out_fraction))
            run.run(config.num_steps, eval_every_steps=config.eval_period,
                    checkpoint_every_steps=config.checkpoint_period, report_every_steps=config.log_period)
        held_out = run.last_eval or learner.evaluate()  # resumed a finished run: report it, train nothing
    except KeyboardInterrupt:
        if learner.step != run.saved_step:
            path = checkpointer.save(learner.step)
            tqdm.tqdm.write(f"interrupted at step {learner.step}; saved {path or 'a checkpoint'}")
        raise
    finally:
        bar.close()
        learner_log.close()
        eval_log.close()
    return {"step": learner.step, "held_out_accuracy": held_out["accuracy"],
            "held_out_loss": held_out["loss"], "seconds": time.time() - started, "logdir": logdir}
