"""The architecture diagram of a Ray run, drawn from the description below.

    python docs/architecture.py      # rewrites docs/architecture.png

``BOXES`` and ``ARROWS`` are the source: each box names the code that
implements it (a module attribute, checked by ``tests/docs/test_docs.py``),
and the PNG records a hash of the description, so the test also fails when
the picture was not redrawn after the description changed.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from typing import Dict, List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
PNG = os.path.join(HERE, "architecture.png")
HASH_KEY = "rlplat-architecture-source"

# name -> (label, implementing code "module:attribute", (x, y) centre, (width, height), process group)
BOXES: Dict[str, Tuple[str, str, Tuple[float, float], Tuple[float, float], str]] = {
    "cli": ("rlplat train <agent>\n(flags checked before Ray)", "rlplat.launch.rl_run:run_agent",
            (1.6, 7.2), (2.6, 0.9), "driver"),
    "driver": ("Driver: control loop\ncounters, stop rules, evals,\ncheckpoints, restarts",
               "rlplat.distributed.driver:Driver", (1.6, 5.5), (2.6, 1.4), "driver"),
    "reaper": ("Reaper\n(kills the run's processes\nif the driver dies)", "rlplat.distributed.reaper:Reaper",
               (1.6, 3.2), (2.6, 1.1), "driver"),
    "logdir": ("logdir: metrics.jsonl, tb/,\ncheckpoints/, videos/, config.json",
               "rlplat.utils.loggers:MetricsLogger", (5.6, 1.6), (3.0, 1.1), "files"),
    "actors": ("ActorWorker x N\nenv loop + policy (NumPy)\n+ n-step adder",
               "rlplat.distributed.workers.actor:ActorWorker", (5.6, 6.8), (2.6, 1.3), "actors"),
    "evaluator": ("Evaluator\ngreedy episodes, video", "rlplat.distributed.workers.evaluator:Evaluator",
                  (5.6, 3.9), (2.6, 1.0), "actors"),
    "reverb": ("Reverb server\ntables + rate limiter", "rlplat.distributed.workers.replay:ReplayServer",
               (9.4, 6.8), (2.6, 1.1), "learner"),
    "learner": ("LearnerWorker\nAgentBuilder.make_learner", "rlplat.distributed.workers.learner:LearnerWorker",
                (9.4, 4.7), (2.6, 1.0), "learner"),
    "replicator": ("Replicator (tf.distribute)\nstep_fn on each replica,\nall-reduce", "rlplat.replication:Replicator",
                   (9.4, 2.8), (2.6, 1.2), "learner"),
}

# (from, to, label)
ARROWS: List[Tuple[str, str, str]] = [
    ("cli", "driver", "run_on_ray"),
    ("driver", "reaper", "pipe"),
    ("driver", "actors", "run chunk / restart"),
    ("driver", "evaluator", "evaluate"),
    ("driver", "learner", "train chunk, save"),
    ("actors", "reverb", "insert transitions"),
    ("reverb", "learner", "sample batches"),
    ("learner", "actors", "weights (pull)"),
    ("learner", "evaluator", "weights"),
    ("learner", "replicator", "step_fn"),
    ("driver", "logdir", "metrics, events"),
    ("learner", "logdir", "checkpoints"),
]

GROUPS = {"driver": "#dbe9f6", "actors": "#e4f2df", "learner": "#fbe7d5", "files": "#eeeeee"}
GROUP_TITLES = {"driver": "driver process", "actors": "Ray actors (one process each)",
                "learner": "learner process (replay inside by default)"}


def source_hash() -> str:
    """A hash of the description: the PNG carries it, so a stale picture is caught."""
    text = json.dumps({"boxes": BOXES, "arrows": ARROWS, "groups": GROUPS, "titles": GROUP_TITLES},
                      sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _edge_point(box, toward):
    """Where the line from ``box``'s centre toward ``toward`` leaves the box."""
    (x, y), (w, h) = box
    dx, dy = toward[0] - x, toward[1] - y
    scale = min((w / 2) / abs(dx) if dx else float("inf"), (h / 2) / abs(dy) if dy else float("inf"))
    return x + dx * scale, y + dy * scale


def draw(path: str = PNG) -> None:
    """Renders the description to ``path`` with matplotlib (no other tool needed)."""
    import matplotlib  # pylint: disable=g-import-not-at-top

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
    from matplotlib.patches import FancyBboxPatch  # pylint: disable=g-import-not-at-top

    fig, ax = plt.subplots(figsize=(11.5, 7.2))
    ax.set_xlim(0, 11.2)
    ax.set_ylim(0.7, 8.1)
    ax.axis("off")
    for group, title in GROUP_TITLES.items():
        members = [b for b in BOXES.values() if b[4] == group]
        xs = [c[0] - s[0] / 2 for _, _, c, s, _ in members] + [c[0] + s[0] / 2 for _, _, c, s, _ in members]
        ys = [c[1] - s[1] / 2 for _, _, c, s, _ in members] + [c[1] + s[1] / 2 for _, _, c, s, _ in members]
        ax.add_patch(FancyBboxPatch((min(xs) - 0.15, min(ys) - 0.15), max(xs) - min(xs) + 0.3,
                                    max(ys) - min(ys) + 0.55, boxstyle="round,pad=0.02",
                                    fc="none", ec="#888888", ls="--"))
        ax.text(min(xs) - 0.1, max(ys) + 0.2, title, fontsize=8, color="#555555")
    for label, _, (x, y), (w, h), group in BOXES.values():
        ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.03",
                                    fc=GROUPS[group], ec="#333333"))
        ax.text(x, y, label, ha="center", va="center", fontsize=8.5)
    for start, end, label in ARROWS:
        a, b = BOXES[start], BOXES[end]
        p = _edge_point((a[2], a[3]), b[2])
        q = _edge_point((b[2], b[3]), a[2])
        ax.annotate("", xy=q, xytext=p, arrowprops=dict(arrowstyle="->", color="#333333", lw=1.2))
        ax.text((p[0] + q[0]) / 2, (p[1] + q[1]) / 2 + 0.08, label, fontsize=7.5, ha="center",
                color="#1f4e79", bbox=dict(fc="white", ec="none", alpha=0.8, pad=0.5))
    ax.set_title("rlplat on Ray: who runs where, and what flows between them", fontsize=11)
    fig.savefig(path, dpi=110, bbox_inches="tight", metadata={HASH_KEY: source_hash()})
    plt.close(fig)


def recorded_hash(path: str = PNG) -> str:
    """The description hash stored in the PNG ("" if none)."""
    from PIL import Image  # pylint: disable=g-import-not-at-top

    with Image.open(path) as image:
        return str(image.info.get(HASH_KEY, ""))


if __name__ == "__main__":
    draw()
    print(f"wrote {PNG}")
    sys.exit(0)
