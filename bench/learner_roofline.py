"""How close the D4PG learner step runs to this machine's matmul peak, in fp32 and in bf16.

One run, one process, nothing else started:

1. **FLOPs per step, counted from the layer shapes.** ``step_matmuls`` lists
   every matrix product of one learner step (online and target networks,
   forward, the critic's weight and input gradients, dQ/da, the policy's DPG
   gradient) as (M, K, N, count); a step's FLOPs are ``sum(2 M K N count)``.
   ``graph_matmuls`` reads the same list from the traced step graph; the test
   checks that the two agree, so the count cannot drift from the code.
2. **The peak for those shapes.** Each distinct (M, K, N) runs alone in a
   compiled function of back-to-back products, as many independent chains
   of them as the learner has inter-op threads (best of a few rounds, same
   TF threads as the learner); the step's matmul-bound time is
   ``sum(flops_i / rate_i)``. A large square product
   gives the machine's best-case rate for reference. Each is measured with
   float32 operands and, for the bf16 learner, bfloat16 ones.
3. **The learner.** The real ``D4PGLearner`` at the default config, fed from
   one batch held in memory (the limit the Reverb feed is measured against in
   ``d4pg_throughput.py``), at the TF thread counts the layout gives it; one
   learner per ``--precisions`` entry (fp32 and bf16: ``rlplat.precision``),
   same weights' shapes, timed in turn A B B A ... in this process.

``fraction_of_peak`` = achieved matmul FLOP/s in the learner / the same-shape
peak of the learner's own precision (the bf16 learner against the bf16
peak). The top-level keys are fp32's; ``by_precision`` holds each, and
``bf16_over_fp32`` the ratios (issue 31's targets: bf16 steps/s >= 1.4x
fp32's, and >= 50% of the bf16 peak). Matmuls are most but not all of a step (layer norm, elu, the categorical
projection, Adam): ``matmul_share`` says how much of the step's time the
matmuls alone would take at peak.

``--backend torch`` (``learner_roofline_torch.py``) runs parts 1-2 and a step
of the same shapes written in PyTorch on whatever device it finds (a GPU
where one is lent), in fp32 only: a proxy for a GPU learner where
TensorFlow 2.15 cannot be installed. It is not rlplat's learner.

    python bench/learner_roofline.py [--env cartpole:swingup] [--threads INTRA,INTER] [--precisions fp32,bf16]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from typing import Any, Dict, List, Sequence, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

Shape = Tuple[int, int, int]  # (M, K, N) of an [M, K] x [K, N] product

# Observation and action sizes of the tasks the benches use (flattened
# control-suite specs), so --backend torch needs neither dm_control nor TF.
TASK_SIZES = {"cartpole:swingup": (5, 1), "cartpole:balance": (5, 1), "walker:walk": (24, 6),
              "cheetah:run": (17, 6), "humanoid:run": (67, 21)}


# ------------------------------------------------------------------- counting
def _mlp_widths(input_size: int, hidden: Sequence[int], output_size: int) -> List[Tuple[int, int]]:
    sizes = [input_size] + [int(h) for h in hidden] + [output_size]
    return list(zip(sizes[:-1], sizes[1:]))


def step_matmuls(obs_size: int, action_size: int, batch: int, policy_layers: Sequence[int],
                 critic_layers: Sequence[int], num_atoms: int) -> Counter:
    """Every matrix product of one D4PG learner step, as {(M, K, N): count}.

    A dense layer [B, i] -> [B, o] costs a forward product (B, i, o); its
    weight gradient x^T g is (i, B, o) and its input gradient g W^T is
    (B, o, i). The passes of one step:

    - target policy and target critic forward on o_t (no gradients);
    - online critic forward on (o_tm1, a_tm1), then its loss gradient: weight
      gradients of every layer and input gradients of all but the first (the
      batch is no variable);
    - online policy forward on o_t, the critic forward on its actions, and
      dQ/da: input gradients of every critic layer, first included (the
      action is an input), no weight gradients;
    - the policy's DPG gradient: weight gradients of every policy layer and
      input gradients of all but the first.
    """
    policy = _mlp_widths(obs_size, policy_layers, action_size)
    critic = _mlp_widths(obs_size + action_size, critic_layers, num_atoms)
    out: Counter = Counter()

    def forward(layers):
        for i, o in layers:
            out[(batch, i, o)] += 1

    def backward(layers, weights: bool, first_input: bool):
        for k, (i, o) in enumerate(layers):
            if weights:
                out[(i, batch, o)] += 1
            if k > 0 or first_input:
                out[(batch, o, i)] += 1

    forward(policy)                     # target policy (o_t)
    forward(critic)                     # target critic
    forward(critic)                     # online critic (o_tm1, a_tm1)
    backward(critic, weights=True, first_input=False)
    forward(policy)                     # online policy (o_t)
    forward(critic)                     # critic on the policy's actions
    backward(critic, weights=False, first_input=True)   # dQ/da
    backward(policy, weights=True, first_input=False)   # DPG policy gradient
    return out


def flops(matmuls: Dict[Shape, int]) -> float:
    """2 M K N per product (a multiply and an add), summed."""
    return float(sum(2 * m * k * n * c for (m, k, n), c in matmuls.items()))


def graph_matmuls(graph: Any) -> Counter:
    """{(M, K, N): count} of the MatMul ops a traced TF graph runs (transposes resolved)."""
    # Only ops the outputs depend on run: TF's runtime prunes the rest (the
    # gradient of a MatMul is built for both operands even when one is unused).
    live, stack = set(), [t.op for t in graph.outputs]
    while stack:
        op = stack.pop()
        if op.name in live:
            continue
        live.add(op.name)
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
    out: Counter = Counter()
    for op in graph.get_operations():
        if op.name not in live or op.type not in ("MatMul", "_FusedMatMul"):
            continue
        a, b = (t.shape.as_list() for t in op.inputs[:2])
        if op.get_attr("transpose_a"):
            a = a[::-1]
        if op.get_attr("transpose_b"):
            b = b[::-1]
        if None in a or None in b or a[1] != b[0]:
            raise ValueError(f"{op.name}: shapes {a} x {b} are not static and matching")
        out[(a[0], a[1], b[1])] += 1
    return out


# ----------------------------------------------------------------- TF backend
def _tf_shape_rates(tf, shapes: Sequence[Shape], seconds: float, chains: int,
                    dtype: Any = None) -> Dict[Shape, float]:
    """Best FLOP/s of each shape over 3 rounds, with ``chains`` independent chains of products.

    Each chain is a sequence of products ordered by control dependencies (no
    extra arithmetic between them, and none can be pruned or hoisted); the
    chains are independent, so TF's inter-op threads run them side by side as
    they can run independent ops of the learner's step. ``dtype``: the
    operands' (float32 when None; bfloat16 for the bf16 learner's products).
    """
    rates = {}
    for m, k, n in shapes:
        pairs = [(tf.cast(tf.random.normal((m, k)), dtype or tf.float32),
                  tf.cast(tf.random.normal((k, n)), dtype or tf.float32)) for _ in range(chains)]
        reps = max(1, int(2e8 // (2 * m * k * n * chains)))  # ~0.2 GFLOP per call

        @tf.function
        def loop(pairs=pairs, reps=reps):
            lasts = []
            for a, b in pairs:
                last = tf.matmul(a, b)
                for _ in range(min(reps, 64) - 1):
                    with tf.control_dependencies([last]):
                        last = tf.matmul(a, b)
                lasts.append(last)
            return lasts

        per_call = min(reps, 64) * chains * 2 * m * k * n
        [x.numpy() for x in loop()]
        best = 0.0
        for _ in range(3):
            calls, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < seconds / 3:
                [x.numpy() for x in loop()]
                calls += 1
            best = max(best, calls * per_call / (time.perf_counter() - t0))
        rates[(m, k, n)] = best
    return rates


def _tf_cast_costs(tf, shapes: Sequence[Shape], seconds: float) -> Dict[str, Dict[str, float]]:
    """Microseconds per product of each shape: in float32, in bfloat16 alone, and as ``BF16Dense`` runs it
    (input and kernel cast to bfloat16, the product cast back to float32): what the casts add.

    Chained as in ``_tf_shape_rates`` (best of 3 rounds, one chain); the float32
    operands are fresh each call, as the learner's activations and weights are.
    """
    out = {}
    for m, k, n in shapes:
        x, w = tf.random.normal((m, k)), tf.random.normal((k, n))
        xb, wb = tf.cast(x, tf.bfloat16), tf.cast(w, tf.bfloat16)
        kinds = {"fp32": (tf.matmul, x, w), "bf16": (tf.matmul, xb, wb), "bf16_with_casts": (_bf16_dense_product, x, w)}
        out[f"{m}x{k}x{n}"] = {f"{name}_us": _chain_us(tf, *kind, seconds / 3) for name, kind in kinds.items()}
    return out


def cast_ms_per_step(counted: Dict[Shape, int], costs: Dict[str, Dict[str, float]]) -> float:
    """What the casts add to a bf16 step, estimated: every product that runs in bfloat16 (no side under
    ``bf16_dense.MIN_BF16_WIDTH``; the narrow ones stay float32) as if it paid a forward's three casts."""
    from rlplat.utils.bf16_dense import MIN_BF16_WIDTH

    return sum(count * (costs[f"{m}x{k}x{n}"]["bf16_with_casts_us"] - costs[f"{m}x{k}x{n}"]["bf16_us"])
               for (m, k, n), count in counted.items() if min(m, k, n) >= MIN_BF16_WIDTH) / 1e3


def _bf16_dense_product(a, b):
    import tensorflow as tf

    return tf.cast(tf.matmul(tf.cast(a, tf.bfloat16), tf.cast(b, tf.bfloat16)), tf.float32)


def _chain_us(tf, product, a, b, seconds: float, reps: int = 32) -> float:
    """Best microseconds per ``product(a, b)`` over 3 rounds of ``seconds / 3``, ``reps`` chained per call."""
    @tf.function
    def loop():
        last = product(a, b)
        for _ in range(reps - 1):
            with tf.control_dependencies([last]):
                last = product(a, b)
        return last

    loop().numpy()
    best = float("inf")
    for _ in range(3):
        calls, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds / 3:
            loop().numpy()
            calls += 1
        best = min(best, (time.perf_counter() - t0) / (calls * reps))
    return best * 1e6


def _abba_rates(learners: Dict[str, Any], seconds: float, rounds: int) -> Dict[str, List[float]]:
    """Steps/s of each learner, timed in turn A B B A ... (``rounds`` each) so drift in the machine's load
    falls on both alike; ``seconds`` in all."""
    names = list(learners)
    out: Dict[str, List[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            learner = learners[name]
            n0, t0 = learner.num_steps, time.perf_counter()
            while time.perf_counter() - t0 < seconds / (rounds * len(names)):
                learner.step()
            out[name].append((learner.num_steps - n0) / (time.perf_counter() - t0))
    return out


def run_tf(args) -> Dict[str, Any]:
    """Parts 1-3 with TensorFlow and the real learner, at each of ``--precisions``."""
    from rlplat.distributed import process

    from rlplat.utils import tf_setup

    intra, inter = (tuple(int(x) for x in args.threads.split(",")) if args.threads else
                    tf_setup.thread_counts(1, cpus=max(1, (os.cpu_count() or 2) // 2)))
    process.setup_worker(intra, inter, hide_gpus=not args.gpu, num_cpu_replicas=1)
    import numpy as np
    import tensorflow as tf

    from rlplat_agents.d4pg.builder import D4PGBuilder
    from rlplat_agents.d4pg.config import D4PGConfig
    from rlplat_agents.d4pg.learning import D4PGLearner
    from rlplat_envs import make_environment
    from rlplat import replication, specs

    cfg = D4PGConfig()
    builder = D4PGBuilder(config=cfg)
    with make_environment(args.env, seed=0) as env:
        spec = specs.make_environment_spec(env)
    obs_size = int(np.prod(spec.observations.shape))
    act_size = int(np.prod(spec.actions.shape))
    batch_size = cfg.global_batch_size
    rng = np.random.default_rng(0)
    batch = (rng.normal(size=(batch_size, obs_size)).astype(np.float32),
             rng.uniform(-1, 1, (batch_size, act_size)).astype(np.float32),
             rng.uniform(0, 1, batch_size).astype(np.float32),
             np.full(batch_size, cfg.discount ** cfg.n_step, np.float32),
             rng.normal(size=(batch_size, obs_size)).astype(np.float32))
    repl = replication.make_replicator(num_replicas=1)
    precisions = args.precisions.split(",")
    # Both learners live in this process and take turns (never at once).
    learners = {p: D4PGLearner(cfg.replace(precision=p), spec, repl,
                               repl.distribute(tf.data.Dataset.from_tensors(batch).repeat()),
                               steps_per_call=builder.steps_per_call, jit_compile=builder.jit_compile)
                for p in precisions}

    counted = step_matmuls(obs_size, act_size, batch_size, cfg.policy_layer_sizes,
                           cfg.critic_layer_sizes, cfg.num_atoms)
    traced = {p: graph_matmuls(learner._grads_fn.get_concrete_function(  # pylint: disable=protected-access
        tuple(tf.constant(x) for x in batch)).graph) for p, learner in learners.items()}
    for learner in learners.values():
        for _ in range(3):  # trace and warm up
            learner.step()
    step_rates = _abba_rates(learners, args.seconds, args.rounds)

    # As many independent chains as TF may run ops side by side (inter-op threads).
    # Grappler would merge a chain's identical products (same inputs) once it
    # drops the control dependencies as redundant: some small shapes then read
    # above the 1024^3 rate. The learner was measured above; switch those
    # rewrites off for the peak only.
    tf.config.optimizer.set_experimental_options({
        "dependency_optimization": False,
        "arithmetic_optimization": False, "constant_folding": False, "loop_optimization": False})
    square = args.square
    reports = {}
    for p in precisions:
        dtype = tf.bfloat16 if p == "bf16" else tf.float32
        rates = _tf_shape_rates(tf, sorted(counted), args.peak_seconds, chains=inter, dtype=dtype)
        square_rate = _tf_shape_rates(tf, [(square, square, square)], args.peak_seconds / 3, chains=inter,
                                      dtype=dtype)
        reports[p] = make_report(args, "tensorflow", "cpu" if not args.gpu else "gpu", counted, traced[p], rates,
                                 square_rate[(square, square, square)], float(np.median(step_rates[p])),
                                 step_rates[p], {"obs_size": obs_size, "action_size": act_size,
                                                 "batch": batch_size, "steps_per_call": builder.steps_per_call,
                                                 "jit_compile": builder.jit_compile, "tf_threads": [intra, inter],
                                                 "precision": p})
    out = combine(reports)
    if "bf16" in precisions:
        costs = _tf_cast_costs(tf, sorted(counted), args.peak_seconds)
        out["bf16_casts"] = {"per_shape": costs, "estimated_cast_ms_per_step": cast_ms_per_step(counted, costs),
                             "bf16_step_ms": 1e3 / reports["bf16"]["learner_steps_per_s"]}
    return out


def combine(reports: Dict[str, Dict[str, Any]]) -> Dict[str, Any]:
    """One report per precision -> the first one's (fp32's) keys at the top, each under ``by_precision``,
    and the bf16 / fp32 ratios with their targets (issue 31: steps/s >= 1.4x, >= 50% of bf16's peak)."""
    first = next(iter(reports.values()))
    out = {**first, "by_precision": {p: {k: r[k] for k in _PER_PRECISION} for p, r in reports.items()}}
    if "fp32" in reports and "bf16" in reports:
        a, b = reports["fp32"], reports["bf16"]
        out["bf16_over_fp32"] = {
            "learner_steps_per_s": b["learner_steps_per_s"] / a["learner_steps_per_s"],
            "peak_same_shapes": b["peak_same_shapes_gflop_per_s"] / a["peak_same_shapes_gflop_per_s"],
            "square_peak": b["square_gflop_per_s"] / a["square_gflop_per_s"],
            "target_steps_ratio": 1.4, "target_fraction_of_bf16_peak": 0.5}
    return out


# What differs between the precisions (the rest, e.g. the FLOP count, is the same).
_PER_PRECISION = ("learner_steps_per_s", "learner_steps_per_s_rounds", "achieved_gflop_per_s",
                  "peak_same_shapes_gflop_per_s", "shape_gflop_per_s", "square_gflop_per_s", "fraction_of_peak",
                  "fraction_of_square_peak", "matmul_share", "matmuls_match_graph")


# --------------------------------------------------------------------- report
def make_report(args, backend, device, counted, traced, rates, square_rate, steps_per_s, step_rates, extra):
    step_flops = flops(counted)
    matmul_bound_s = sum(2 * m * k * n * c / rates[(m, k, n)] for (m, k, n), c in counted.items())
    peak_same_shapes = step_flops / matmul_bound_s
    achieved = step_flops * steps_per_s
    from seeds import machine  # bench/seeds.py: CPU model, cores, AVX-512

    return {
        "benchmark": "learner_roofline",
        "env": args.env,
        "backend": backend,
        "device": device,
        "machine": machine(),
        "settings": extra,
        "step_gflop": step_flops / 1e9,
        "matmuls_counted": [[m, k, n, c] for (m, k, n), c in sorted(counted.items())],
        "matmuls_match_graph": None if traced is None else dict(traced) == dict(counted),
        "learner_steps_per_s": steps_per_s,
        "learner_steps_per_s_rounds": step_rates,
        "achieved_gflop_per_s": achieved / 1e9,
        "peak_same_shapes_gflop_per_s": peak_same_shapes / 1e9,
        "shape_gflop_per_s": [[m, k, n, rates[(m, k, n)] / 1e9] for (m, k, n) in sorted(counted)],
        "square_size": args.square,
        "square_gflop_per_s": square_rate / 1e9,
        "fraction_of_peak": achieved / peak_same_shapes,
        "fraction_of_square_peak": achieved / square_rate,
        "matmul_share": matmul_bound_s * steps_per_s,
        "target_fraction": 0.5,
    }


def plot(report: Dict[str, Any], path: str) -> None:
    """Per-shape peak FLOP/s (bars) against the learner's achieved rate (line)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by = report.get("by_precision") or {"fp32": report}
    labels = [f"{m}x{k}x{n}" for m, k, n, _ in report["shape_gflop_per_s"]]
    fig, ax = plt.subplots(figsize=(10, 4.5))
    width = 0.8 / len(by)
    for i, (p, r) in enumerate(by.items()):  # bars side by side, one colour pair per precision
        light, dark, line = (("#8fb3d9", "#1f4e79", "#c0392b") if i == 0 else ("#f5c28c", "#a04000", "#6c3483"))
        ax.bar([x + (i - (len(by) - 1) / 2) * width for x in range(len(labels))],
               [g for *_, g in r["shape_gflop_per_s"]], width, color=light, label=f"{p}: peak of this shape alone")
        ax.axhline(r["peak_same_shapes_gflop_per_s"], color=dark, ls="--",
                   label=f"{p}: the step's matmuls at peak: {r['peak_same_shapes_gflop_per_s']:.0f} GFLOP/s")
        ax.axhline(r["achieved_gflop_per_s"], color=line,
                   label=f"{p} learner: {r['learner_steps_per_s']:.1f} steps/s, {r['achieved_gflop_per_s']:.0f} "
                         f"GFLOP/s ({100 * r['fraction_of_peak']:.0f}% of its peak)")
    shapes = labels
    ax.set_xticks(range(len(shapes)))
    ax.set_xticklabels(labels, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("GFLOP/s")
    m = report["machine"]
    ax.set_title(f"D4PG learner roofline, {report['env']}: {report['learner_steps_per_s']:.1f} steps/s, "
                 f"{report['step_gflop']:.2f} GFLOP/step\n{report['device']} / {m.get('cpu_model')} "
                 f"({m.get('cpus')} cores), {report['backend']}", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", default="cartpole:swingup", choices=sorted(TASK_SIZES))
    parser.add_argument("--backend", default="tensorflow", choices=("tensorflow", "torch"))
    parser.add_argument("--threads", default=None,
                        help="TF intra,inter op threads (default: what the local layout gives the learner, "
                             "half the cores)")
    parser.add_argument("--gpu", action="store_true", help="let TensorFlow see a GPU")
    parser.add_argument("--cuda-graph", action="store_true", help="torch on a GPU: replay each step as a CUDA graph")
    parser.add_argument("--seconds", type=float, default=30.0, help="learner timing, all rounds")
    parser.add_argument("--rounds", type=int, default=4, help="timed turns of each learner (A B B A ...)")
    parser.add_argument("--precisions", default="fp32,bf16",
                        help="learner precisions to time and peaks to measure, comma-separated (fp32 first)")
    parser.add_argument("--peak-seconds", type=float, default=1.5, help="per matmul shape")
    parser.add_argument("--square", type=int, default=1024)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    parser.add_argument("--name", default="learner_roofline", help="output file stem")
    args = parser.parse_args(argv)
    if args.backend == "tensorflow":
        report = run_tf(args)
    else:
        from learner_roofline_torch import run_torch  # bench/: the PyTorch proxy step

        report = run_torch(args)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"{args.name}.json"), "w") as f:
        json.dump(report, f, indent=1)
    plot(report, os.path.join(args.out, f"{args.name}.png"))
    for p, r in (report.get("by_precision") or {"fp32": report}).items():
        print(f"{report['device']} {p}: {r['learner_steps_per_s']:.1f} learner steps/s x "
              f"{report['step_gflop']:.3f} GFLOP = {r['achieved_gflop_per_s']:.1f} GFLOP/s; "
              f"same-shape peak {r['peak_same_shapes_gflop_per_s']:.1f} -> "
              f"{100 * r['fraction_of_peak']:.0f}% (target 50%); {args.square}^3 peak "
              f"{r['square_gflop_per_s']:.1f}; matmuls would take {100 * r['matmul_share']:.0f}% "
              f"of the step at peak; graph count matches: {r['matmuls_match_graph']}")
    casts = report.get("bf16_casts")
    if casts:
        for shape, t in casts["per_shape"].items():
            print(f"  {shape}: fp32 {t['fp32_us']:.0f} us, bf16 {t['bf16_us']:.0f} us, bf16 with its casts "
                  f"{t['bf16_with_casts_us']:.0f} us")
        print(f"bf16 casts: about {casts['estimated_cast_ms_per_step']:.1f} ms of a {casts['bf16_step_ms']:.1f} ms "
              "bf16 step")
    ratio = report.get("bf16_over_fp32")
    if ratio:
        print(f"bf16 / fp32: learner steps/s {ratio['learner_steps_per_s']:.2f}x (target 1.4x), same-shape peak "
              f"{ratio['peak_same_shapes']:.2f}x, {args.square}^3 peak {ratio['square_peak']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
