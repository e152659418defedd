"""How close the D4PG learner step runs to this machine's fp32 matmul peak.

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
   gives the machine's best-case fp32 rate for reference.
3. **The learner.** The real ``D4PGLearner`` at the default config, fed from
   one batch held in memory (the limit the Reverb feed is measured against in
   ``d4pg_throughput.py``), at the TF thread counts the layout gives it.

``fraction_of_peak`` = achieved matmul FLOP/s in the learner / the same-shape
peak. Matmuls are most but not all of a step (layer norm, elu, the categorical
projection, Adam): ``matmul_share`` says how much of the step's time the
matmuls alone would take at peak.

``--backend torch`` runs parts 1-2 and a step of the same shapes written in
PyTorch on whatever device it finds (a GPU where one is lent): a proxy for a
GPU learner where TensorFlow 2.15 cannot be installed (no wheel for the
Python there). It is not rlplat's learner.

    python bench/learner_roofline.py [--env cartpole:swingup] [--threads INTRA,INTER] [--name NAME]
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
def _tf_shape_rates(tf, shapes: Sequence[Shape], seconds: float, chains: int) -> Dict[Shape, float]:
    """Best FLOP/s of each shape over 3 rounds, with ``chains`` independent chains of products.

    Each chain is a sequence of products ordered by control dependencies (no
    extra arithmetic between them, and none can be pruned or hoisted); the
    chains are independent, so TF's inter-op threads run them side by side as
    they can run independent ops of the learner's step.
    """
    rates = {}
    for m, k, n in shapes:
        pairs = [(tf.random.normal((m, k)), tf.random.normal((k, n))) for _ in range(chains)]
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


def run_tf(args) -> Dict[str, Any]:
    """Parts 1-3 with TensorFlow and the real learner."""
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
    learner = D4PGLearner(cfg, spec, repl, repl.distribute(tf.data.Dataset.from_tensors(batch).repeat()),
                          steps_per_call=builder.steps_per_call, jit_compile=builder.jit_compile)

    counted = step_matmuls(obs_size, act_size, batch_size, cfg.policy_layer_sizes,
                           cfg.critic_layer_sizes, cfg.num_atoms)
    traced = graph_matmuls(learner._grads_fn.get_concrete_function(  # pylint: disable=protected-access
        tuple(tf.constant(x) for x in batch)).graph)

    for _ in range(3):  # trace and warm up
        learner.step()
    step_rates = []
    for _ in range(args.rounds):
        n0, t0 = learner.num_steps, time.perf_counter()
        while time.perf_counter() - t0 < args.seconds / args.rounds:
            learner.step()
        step_rates.append((learner.num_steps - n0) / (time.perf_counter() - t0))
    steps_per_s = float(np.median(step_rates))

    # As many independent chains as TF may run ops side by side (inter-op threads).
    # Grappler would merge a chain's identical products (same inputs) once it
    # drops the control dependencies as redundant: some small shapes then read
    # above the 1024^3 rate. The learner was measured above; switch those
    # rewrites off for the peak only.
    tf.config.optimizer.set_experimental_options({
        "dependency_optimization": False,
        "arithmetic_optimization": False, "constant_folding": False, "loop_optimization": False})
    rates = _tf_shape_rates(tf, sorted(counted), args.peak_seconds, chains=inter)
    square = args.square
    square_rate = _tf_shape_rates(tf, [(square, square, square)], args.peak_seconds / 3, chains=inter)
    return _report(args, "tensorflow", "cpu" if not args.gpu else "gpu", counted, traced, rates,
                   square_rate[(square, square, square)], steps_per_s, step_rates,
                   {"obs_size": obs_size, "action_size": act_size, "batch": batch_size,
                    "steps_per_call": builder.steps_per_call, "jit_compile": builder.jit_compile,
                    "tf_threads": [intra, inter]})


# -------------------------------------------------------------- torch backend
def run_torch(args) -> Dict[str, Any]:
    """Parts 1-2 and a same-shape proxy step in PyTorch (fp32, TF32 off)."""
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    obs_size, act_size = TASK_SIZES[args.env]
    batch_size, policy_layers, critic_layers, atoms = 256, (256, 256, 256), (512, 512, 256), 51
    counted = step_matmuls(obs_size, act_size, batch_size, policy_layers, critic_layers, atoms)

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    def shape_rates(shapes, seconds):
        rates = {}
        for m, k, n in shapes:
            a = torch.randn(m, k, device=device)
            b = torch.randn(k, n, device=device)
            reps = max(1, int(2e8 // (2 * m * k * n)))
            best = 0.0
            for _ in range(4):
                sync()
                calls, t0 = 0, time.perf_counter()
                while time.perf_counter() - t0 < seconds / 4:
                    for _ in range(reps):
                        torch.mm(a, b)
                    calls += 1
                    sync()
                best = max(best, calls * reps * 2 * m * k * n / (time.perf_counter() - t0))
            rates[(m, k, n)] = best
        return rates

    def mlp(sizes, out):
        layers, prev = [], sizes[0]
        for i, h in enumerate(sizes[1:]):
            layers += [torch.nn.Linear(prev, h)]
            layers += [torch.nn.LayerNorm(h), torch.nn.Tanh()] if i == 0 else [torch.nn.ELU()]
            prev = h
        layers.append(torch.nn.Linear(prev, out))
        return torch.nn.Sequential(*layers).to(device)

    policy, target_policy = (mlp((obs_size,) + policy_layers, act_size) for _ in range(2))
    critic, target_critic = (mlp((obs_size + act_size,) + critic_layers, atoms) for _ in range(2))
    support = torch.linspace(-150, 150, atoms, device=device)
    graphed = args.cuda_graph and device == "cuda"
    # capturable: Adam keeps its step count on the GPU, so a captured step replays correctly.
    opt_p = torch.optim.Adam(policy.parameters(), 1e-4, capturable=graphed)
    opt_c = torch.optim.Adam(critic.parameters(), 1e-4, capturable=graphed)
    o_tm1 = torch.randn(batch_size, obs_size, device=device)
    a_tm1 = torch.rand(batch_size, act_size, device=device) * 2 - 1
    o_t = torch.randn(batch_size, obs_size, device=device)
    r_t = torch.rand(batch_size, device=device)

    def eager_step():
        with torch.no_grad():
            target = torch.softmax(target_critic(torch.cat([o_t, torch.tanh(target_policy(o_t))], 1)), 1)
            # Stand-in for the categorical projection: same shapes, no sort.
            target = target * (1 + 0 * r_t[:, None])
        logits = critic(torch.cat([o_tm1, a_tm1], 1))
        critic_loss = -(target * torch.log_softmax(logits, 1)).sum(1).mean()
        opt_c.zero_grad(set_to_none=True)
        critic_loss.backward()
        opt_c.step()
        actions = torch.tanh(policy(o_t))
        q = (torch.softmax(critic(torch.cat([o_t, actions], 1)), 1) * support).sum(1)
        opt_p.zero_grad(set_to_none=True)
        (-q.mean()).backward(inputs=list(policy.parameters()))
        opt_p.step()

    step = eager_step
    if graphed:
        # One CUDA graph replays the whole step: no Python or launch cost per kernel.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                eager_step()
        torch.cuda.current_stream().wait_stream(side)
        opt_c.zero_grad(set_to_none=True)
        opt_p.zero_grad(set_to_none=True)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            eager_step()
        step = graph.replay
    for _ in range(20):
        step()
    sync()
    step_rates = []
    for _ in range(args.rounds):
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < args.seconds / args.rounds:
            for _ in range(10):
                step()
            n += 10
            sync()
        step_rates.append(n / (time.perf_counter() - t0))
    rates = shape_rates(sorted(counted), args.peak_seconds)
    square = args.square
    square_rate = shape_rates([(square, square, square)], args.peak_seconds / 3)[(square, square, square)]
    name = torch.cuda.get_device_name(0) if device == "cuda" else "cpu"
    mode = "one CUDA graph per step" if graphed else "eager"
    backend = f"torch {torch.__version__}, {mode} (proxy step, not rlplat's learner)"
    return _report(args, backend, name, counted,
                   None, rates, square_rate, float(sorted(step_rates)[len(step_rates) // 2]), step_rates,
                   {"obs_size": obs_size, "action_size": act_size, "batch": batch_size, "tf32": False})


# --------------------------------------------------------------------- report
def _report(args, backend, device, counted, traced, rates, square_rate, steps_per_s, step_rates, extra):
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

    shapes = report["shape_gflop_per_s"]
    labels = [f"{m}x{k}x{n}" for m, k, n, _ in shapes]
    fig, ax = plt.subplots(figsize=(10, 4.5))
    ax.bar(range(len(shapes)), [r for *_, r in shapes], color="#8fb3d9", label="peak of this shape alone")
    ax.axhline(report["peak_same_shapes_gflop_per_s"], color="#1f4e79", ls="--",
               label=f"the step's matmuls at peak: {report['peak_same_shapes_gflop_per_s']:.0f} GFLOP/s")
    ax.axhline(report["achieved_gflop_per_s"], color="#c0392b",
               label=f"learner achieved: {report['achieved_gflop_per_s']:.0f} GFLOP/s "
                     f"({100 * report['fraction_of_peak']:.0f}%)")
    ax.set_xticks(range(len(shapes)))
    ax.set_xticklabels(labels, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("GFLOP/s (fp32)")
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
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--peak-seconds", type=float, default=1.5, help="per matmul shape")
    parser.add_argument("--square", type=int, default=1024)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    parser.add_argument("--name", default="learner_roofline", help="output file stem")
    args = parser.parse_args(argv)
    report = run_tf(args) if args.backend == "tensorflow" else run_torch(args)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"{args.name}.json"), "w") as f:
        json.dump(report, f, indent=1)
    plot(report, os.path.join(args.out, f"{args.name}.png"))
    print(f"{report['device']}: {report['learner_steps_per_s']:.1f} learner steps/s x "
          f"{report['step_gflop']:.3f} GFLOP = {report['achieved_gflop_per_s']:.1f} GFLOP/s; "
          f"same-shape peak {report['peak_same_shapes_gflop_per_s']:.1f} -> "
          f"{100 * report['fraction_of_peak']:.0f}% (target 50%); {args.square}^3 peak "
          f"{report['square_gflop_per_s']:.1f}; matmuls would take {100 * report['matmul_share']:.0f}% "
          f"of the step at peak; graph count matches: {report['matmuls_match_graph']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
