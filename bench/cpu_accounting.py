"""CPU accounting shared by the throughput benches: per-thread and per-process CPU from /proc.

Used by ``d4pg_throughput.py`` and ``impala_throughput.py``: snapshots of a
process's threads (``thread_cpu_table``) and their difference by thread name,
the windows of actor chunks whose CPU is split into parts
(``actor_window``, ``breakdown_us``: env step, policy, Reverb write, weight
pull, Ray dispatch, background threads), a sampler of CPU per process role
(``CpuSampler``; ``LearnerThreadSampler`` also per learner thread), and
small statistics (``median``, ``slope``), and the CPU a command's processes had
used by a given time (``DescendantCpuSampler``, for ``startup.py``). Linux only.
"""

from __future__ import annotations

import math
import os
import statistics
import threading
import time

# Thread names (Linux comm, 15 chars) that belong to Ray's core worker. Other
# background threads are gRPC's (shared by Reverb's writer stream and Ray) or
# jemalloc/TF housekeeping.
RAY_THREAD_PREFIXES = ("worker.", "client.poll", "server.poll", "timer_manager", "task_event_buf",
                        "gcs_client", "global.accessor", "ray::", "core_worker", "periodical",
                        "metrics", "raylet", "event_stats")


PARTS = ("env", "policy", "reverb_write", "weight_pull", "loop_other", "ray_dispatch_main",
          "background_ray", "background_grpc_other")


PART_LABELS = {
    "env": "env step (+reset)",
    "policy": "policy (NumPy + noise)",
    "reverb_write": "Reverb write (adder, client side)",
    "weight_pull": "weight pull (Ray call + load)",
    "loop_other": "loop bookkeeping",
    "ray_dispatch_main": "Ray task dispatch (main thread)",
    "background_ray": "Ray core-worker threads",
    "background_grpc_other": "Reverb writer/gRPC/other threads",
}


# ----------------------------------------------------------------- helpers
def thread_cpu_table(pid="self"):
    """{tid: [name, cpu seconds]} for the threads of process ``pid`` (this one by default), from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    table = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        table[int(tid)] = [name, (int(fields[11]) + int(fields[12])) / tick]
    return table


def is_ray_thread(name: str, main_name: str = "") -> bool:
    """Ray's own threads: named by Ray, or started while the worker was still "ray::IDLE".

    Threads started later (TF pools, Reverb's writer, Python threads) inherit
    the main thread's name (the actor's process title) and are not Ray's.
    """
    return name != main_name and name.startswith(RAY_THREAD_PREFIXES)


def load_average():
    return [round(x, 2) for x in os.getloadavg()]


def median(values):
    values = [v for v in values if v is not None and math.isfinite(v)]
    return statistics.median(values) if values else None


def slope(points):
    """Least-squares slope of y over x for [(x, y)], or None."""
    if len(points) < 2:
        return None
    mx = sum(p[0] for p in points) / len(points)
    my = sum(p[1] for p in points) / len(points)
    sxx = sum((p[0] - mx) ** 2 for p in points)
    if sxx <= 0:
        return None
    return sum((p[0] - mx) * (p[1] - my) for p in points) / sxx


def thread_diff(before, after, exclude=None):
    """CPU seconds per thread name between two ``thread_cpu_table`` snapshots."""
    by_name = {}
    for tid, (name, cpu) in after.items():
        if tid == exclude:
            continue
        delta = cpu - (before.get(tid, [name, 0.0])[1])
        if delta > 0:
            by_name[name] = by_name.get(name, 0.0) + delta
    return by_name


def window_between_raw_blocks(ray, handles, raws, chunk_steps, chunks, raw_steps, timeout_s=300.0):
    """One ``actor_window`` of ``handles`` with a raw block of ``raw_steps`` just before and just after it.

    The raw steppers (as many as actors, ``raws[i].run``) bracket the window
    because the machine's speed drifts between blocks: identical raw blocks
    read +-10% within one run, and the mean of the two blocks tracks the
    window better than the block before it alone. Returns ``(before, windows,
    after)``.
    """
    def raw_block():
        return ray.get([raws[i].run.remote(raw_steps) for i in range(len(handles))], timeout=timeout_s)

    before = raw_block()
    windows = actor_window(ray, handles, chunk_steps, chunks)
    return before, windows, raw_block()


def steps_per_cpu_s(blocks):
    """Mean steps per CPU-second of raw blocks (``{"steps", "cpu_s", ...}`` each)."""
    return statistics.mean(x["steps"] / x["cpu_s"] for x in blocks)


def actor_window(ray, handles, chunk_steps, chunks):
    """Runs ``chunks`` run_steps calls on each actor (one in flight each, as the driver does)."""
    before = ray.get([h.cpu_snapshot.remote() for h in handles])
    per_actor = [[] for _ in handles]
    left = [chunks] * len(handles)
    pending = {}
    for i, h in enumerate(handles):
        pending[h.run_steps.remote(chunk_steps)] = i
        left[i] -= 1
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1)
        for ref in ready:
            i = pending.pop(ref)
            per_actor[i].append(ray.get(ref))
            if left[i] > 0:
                pending[handles[i].run_steps.remote(chunk_steps)] = i
                left[i] -= 1
    after = ray.get([h.cpu_snapshot.remote() for h in handles])
    out = []
    for b, a, stats in zip(before, after, per_actor):
        exec_tid = a["pid"]  # Ray runs a sync actor's tasks on the main thread (tid == pid) ...
        exec_cpu = None
        if b["exec_thread_cpu_s"] is not None and a["exec_thread_cpu_s"] is not None:
            exec_cpu = a["exec_thread_cpu_s"] - b["exec_thread_cpu_s"]
        threads_b = {int(k): v for k, v in b["threads"].items()}
        threads_a = {int(k): v for k, v in a["threads"].items()}
        if exec_cpu is None:  # ... fall back to /proc for the main thread (10 ms ticks).
            exec_cpu = threads_a.get(exec_tid, ["", 0.0])[1] - threads_b.get(exec_tid, ["", 0.0])[1]
        # Background = every thread but the one running the tasks; find it as the busiest.
        diffs = {tid: cpu - threads_b.get(tid, [name, 0.0])[1] for tid, (name, cpu) in threads_a.items()}
        busiest = max(diffs, key=diffs.get)
        background = thread_diff(threads_b, threads_a, exclude=busiest)
        main_name = threads_a[busiest][0]
        out.append({
            "steps": sum(s["env_steps"] for s in stats),
            "process_cpu_s": a["process_cpu_s"] - b["process_cpu_s"],
            "exec_thread_cpu_s": exec_cpu,
            "window_wall_s": a["time"] - b["time"],
            "loop": {k: sum(s[k] for s in stats)
                     for k in ("env_s", "policy_s", "observe_s", "update_s", "wall_s", "thread_cpu_s")},
            "background_threads": background,
            "main_thread_name": main_name,
        })
    return out


def breakdown_us(windows):
    """Per-step CPU (us) by part, summed over actor windows."""
    steps = sum(w["steps"] for w in windows)
    loop = {k: sum(w["loop"][k] for w in windows) for k in windows[0]["loop"]}
    # The loop times its parts with a wall clock; scale them by the loop thread's
    # CPU/wall so they add up to CPU (they differ only when the OS preempts us).
    scale = loop["thread_cpu_s"] / loop["wall_s"] if loop["wall_s"] > 0 else 1.0
    parts = {"env": loop["env_s"] * scale, "policy": loop["policy_s"] * scale,
             "reverb_write": loop["observe_s"] * scale, "weight_pull": loop["update_s"] * scale}
    parts["loop_other"] = max(0.0, loop["thread_cpu_s"] - sum(parts.values()))
    exec_cpu = sum(w["exec_thread_cpu_s"] for w in windows)
    parts["ray_dispatch_main"] = max(0.0, exec_cpu - loop["thread_cpu_s"])
    names = {}
    main_name = windows[0]["main_thread_name"]
    for w in windows:
        for name, cpu in w["background_threads"].items():
            name = "(main's name: TF/Reverb/Python)" if name == w["main_thread_name"] else name
            names[name] = names.get(name, 0.0) + cpu
    process_cpu = sum(w["process_cpu_s"] for w in windows)
    background = max(0.0, process_cpu - exec_cpu)
    ray_named = sum(c for n, c in names.items() if is_ray_thread(n, main_name))
    named = sum(names.values())
    # /proc ticks and the precise clocks differ slightly; split the precise total by the named shares.
    ray_share = ray_named / named if named > 0 else 0.0
    parts["background_ray"] = background * ray_share
    parts["background_grpc_other"] = background * (1.0 - ray_share)
    us = {k: 1e6 * v / steps for k, v in parts.items()}
    grouped = {"env": us["env"], "policy_numpy_and_noise": us["policy"],
               "reverb_write": us["reverb_write"] + us["background_grpc_other"],
               "ray_and_weight_pull": us["weight_pull"] + us["ray_dispatch_main"] + us["background_ray"],
               "loop_other": us["loop_other"]}
    return {
        "per_step_us": {k: round(us[k], 2) for k in PARTS},
        "per_step_us_grouped": {k: round(v, 2) for k, v in grouped.items()},
        "total_cpu_us_per_step": round(1e6 * process_cpu / steps, 2),
        "loop_wall_us_per_step": round(1e6 * loop["wall_s"] / steps, 2),
        "loop_cpu_over_wall": round(scale, 3),
        "background_threads_cpu_us_per_step_by_name": {
            n: round(1e6 * c / steps, 2) for n, c in sorted(names.items(), key=lambda x: -x[1]) if c > 0},
        "steps": steps,
    }


# ---------------------------------------------------------------- 3. system
class CpuSampler:
    """Samples CPU seconds per process role from /proc, once a second, in a thread."""

    def __init__(self, period_s=1.0):
        self._period = period_s
        self._stop = threading.Event()
        self.samples = []  # (time.time(), {pid: (role, cpu_s)}, (busy_s, total_s))
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        self._thread.join()

    def _run(self):
        while not self._stop.is_set():
            self.samples.append((time.time(), self._processes(), system_cpu()))
            self._stop.wait(self._period)

    def _processes(self):
        """{pid: (role, cpu_s)} of the processes this sampler watches: every one on the machine."""
        return processes_cpu()

    def between(self, t0, t1):
        """CPU cores used per role from the first sample at or after t0 to the last at or before t1.

        Inside the window, so every worker that produced its records is still alive in both.
        """
        inside = [s for s in self.samples if t0 <= s[0] <= t1]
        if len(inside) < 2:
            return None
        a, b = inside[0], inside[-1]
        dt = b[0] - a[0]
        if dt <= 0:
            return None
        roles = {}
        for pid, (role, cpu) in b[1].items():
            before = a[1].get(pid)  # same pid, same process (a role can change: IDLE -> actor)
            if before and role == "other":  # an exiting process has an empty cmdline
                role = before[0]
            delta = cpu - (before[1] if before else 0.0)
            roles[role] = roles.get(role, 0.0) + max(0.0, delta)
        busy = (b[2][0] - a[2][0]) / (b[2][1] - a[2][1]) * (os.cpu_count() or 1)
        return {"seconds": round(dt, 1),
                "cores_by_role": {k: round(v / dt, 3) for k, v in sorted(roles.items(), key=lambda x: -x[1])},
                "cores_busy_total": round(busy, 3)}


class LearnerThreadSampler(CpuSampler):
    """Also samples the learner process's CPU per thread name (which threads eat its core)."""

    def _run(self):
        self.threads = []  # (time.time(), {(pid, tid): [name, cpu_s]})
        while not self._stop.is_set():
            now = time.time()
            self.samples.append((now, processes_cpu(), system_cpu()))
            pids = [pid for pid, (role, _) in self.samples[-1][1].items() if role == "learner"]
            self.threads.append((now, _threads_of(pids)))
            self._stop.wait(self._period)

    def learner_threads_between(self, t0, t1):
        """Cores used per learner thread name between the first and last samples inside [t0, t1]."""
        inside = [s for s in getattr(self, "threads", []) if t0 <= s[0] <= t1]
        if len(inside) < 2:
            return None
        (ta, a), (tb, b) = inside[0], inside[-1]
        by_name = {}
        for key, (name, cpu) in b.items():
            delta = cpu - a.get(key, (name, 0.0))[1]
            # Ray names its threads; TF, Reverb and gRPC pool threads keep the process title.
            label = name if not name.startswith("ray::") else "(unnamed: TF/Reverb/gRPC pools, main)"
            by_name[label] = by_name.get(label, 0.0) + max(0.0, delta)
        return {k: round(v / (tb - ta), 3) for k, v in sorted(by_name.items(), key=lambda x: -x[1]) if v > 0}


def _threads_of(pids):
    out = {}
    for pid in pids:
        try:
            table = thread_cpu_table(pid)
        except OSError:  # the process ended
            continue
        out.update({(pid, tid): entry for tid, entry in table.items()})
    return out


def process_role(pid, cmdline):
    if pid == os.getpid():
        return "driver"
    head = cmdline.split("\0")[0] if cmdline else ""
    for prefix, role in (("ray::LearnerWorker", "learner"), ("ray::ActorWorker", "actors"),
                         ("ray::Evaluator", "evaluator"), ("ray::DashboardAgent", "ray_agents"),
                         ("ray::RuntimeEnvAgent", "ray_agents"), ("ray::", "ray_other_workers")):
        if head.startswith(prefix):
            return role
    if "ray" in cmdline or "raylet" in cmdline or "gcs_server" in cmdline:
        return "ray_system"
    return "other"


def processes_cpu():
    return {pid: (process_role(pid, cmdline), cpu) for pid, (_, cpu, cmdline) in proc_stats().items()}


def proc_stats():
    """{pid: (parent pid, CPU seconds, NUL-separated command line)} of every process in /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
            with open(f"/proc/{entry}/cmdline") as f:
                cmdline = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        out[int(entry)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / tick, cmdline)
    return out


def system_cpu():
    with open("/proc/stat") as f:
        values = [int(x) for x in f.readline().split()[1:]]
    idle = values[3] + values[4]
    return (sum(values) - idle), sum(values)


class DescendantCpuSampler(CpuSampler):
    """CPU seconds of every process this process starts (children, their children...), by role, in a thread.

    For a command's start-up: what all of its processes (the driver, Ray's
    services, the workers) had used by a given wall time. A process's role is
    the last one seen for its pid (a Ray worker starts as plain Python and is
    renamed ``ray::<Class>`` once it hosts an actor); a direct child of this
    process is the ``driver``. CPU of a process that exits between samples is
    lost, so ``period_s`` is kept short.
    """

    def __init__(self, period_s: float = 0.2):
        super().__init__(period_s)
        self._roles = {}

    def _processes(self):
        me, stats = os.getpid(), proc_stats()
        out = {}
        for pid, (_, cpu, cmdline) in stats.items():
            depth, up = 0, pid
            while up in stats and up != me and depth < 64:
                depth, up = depth + 1, stats[up][0]
            if up != me or not depth:
                continue
            role = "driver" if depth == 1 else process_role(pid, cmdline)
            if role != "other" or pid not in self._roles:
                self._roles[pid] = role
            out[pid] = (self._roles[pid], cpu)
        return out

    def by_role_at(self, wall_time):
        """CPU seconds per role of the processes alive in the last sample at or before ``wall_time``."""
        before = [s for s in self.samples if s[0] <= wall_time]
        if not before:
            return {}
        roles = {}
        for pid, (_, seconds) in before[-1][1].items():
            role = self._roles.get(pid, "other")  # the last role seen, not the one at that sample
            roles[role] = roles.get(role, 0.0) + seconds
        return {k: round(v, 2) for k, v in sorted(roles.items(), key=lambda x: -x[1])}
