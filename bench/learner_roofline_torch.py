"""``learner_roofline.py --backend torch``: the roofline's shapes and a same-shape D4PG step in PyTorch.

A proxy for a GPU learner where TensorFlow 2.15 cannot be installed (no
wheel for the Python there); it is not rlplat's learner. Parts 1-2 of
``learner_roofline`` (the step's matmuls and their peaks) run on whatever
device torch finds, fp32 with TF32 off.
"""

from __future__ import annotations

import time
from typing import Any, Dict

from learner_roofline import TASK_SIZES, make_report, step_matmuls


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
    return make_report(args, backend, name, counted,
                   None, rates, square_rate, float(sorted(step_rates)[len(step_rates) // 2]), step_rates,
                   {"obs_size": obs_size, "action_size": act_size, "batch": batch_size, "tf32": False})
