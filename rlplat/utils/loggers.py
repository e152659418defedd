"""Metrics logging: TensorBoard scalars, a JSONL file and the console.

One ``MetricsLogger`` per role (learner, evaluator, actor_3, ...):

- TensorBoard: one event-file writer per role under ``<logdir>/tb/<role>``,
  so TensorBoard shows each role as its own run (``tb_events``: no
  TensorFlow needed, so the Ray driver does not import it).
- JSONL: one JSON object per line in ``<logdir>/metrics.jsonl``, shared by
  all roles of the run: ``{"step": 300, "wall_time": 1.7e9, "role":
  "learner", "loss": 0.05, ...}``. Each record is one ``write`` to a file
  opened in append mode, so a resumed run (and other roles) add to the same
  file. Non-finite floats are written as ``NaN``/``Infinity``, which Python's
  ``json`` and pandas read back.
- Console: an optional one-line summary per write.

On resume, pass ``purge_after_step=<restored step>``: this role's JSONL lines
with a larger step (logged after the last checkpoint by the run that died)
are dropped, so the file has no repeated steps. (TensorBoard keeps such
events; its viewer shows the latest value per step.)
"""

from __future__ import annotations

import io
import json
import math
import numbers
import os
import sys
import time
from typing import Any, Callable, Dict, Mapping, Optional

import numpy as np

from rlplat import run_dir
from rlplat.utils import tb_events

JSONL_NAME = run_dir.METRICS


class MetricsLogger:
    """Writes scalar metrics for one role to TensorBoard, JSONL and the console."""

    def __init__(self, logdir: str, role: str, *, tensorboard: bool = True, jsonl: bool = True,
                 console: bool = False, print_fn: Callable[[str], None] = print,
                 purge_after_step: Optional[int] = None):
        if not role or os.sep in role:
            raise ValueError(f"role must be a non-empty name without {os.sep!r} (got {role!r})")
        self.logdir = logdir
        self.role = role
        self._print = print_fn if console else None
        os.makedirs(logdir, exist_ok=True)
        folder = os.path.join(run_dir.tensorboard_dir(logdir), role)
        self._writer = tb_events.EventFileWriter(folder) if tensorboard else None
        self.jsonl_path = os.path.join(logdir, JSONL_NAME) if jsonl else None
        self._jsonl = None
        if self.jsonl_path:
            if purge_after_step is not None:
                purge_jsonl(self.jsonl_path, role, purge_after_step)
            self._jsonl = open(self.jsonl_path, "a", encoding="utf-8")
            if self._jsonl.tell() and not _ends_with_newline(self.jsonl_path):
                self._jsonl.write("\n")  # a record cut short by a crash stays on its own line

    def write(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Logs ``metrics`` (name -> scalar) at ``step``."""
        step = int(step)
        values = {name: _to_python(value) for name, value in metrics.items()}
        if self._writer is not None:
            for name, value in values.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    self._writer.scalar(name, value, step)
            self._writer.flush()
        if self._jsonl is not None:
            self._follow_replaced_file()
            record = {"step": step, "wall_time": time.time(), "role": self.role, **values}
            self._jsonl.write(json.dumps(record) + "\n")
            self._jsonl.flush()
        if self._print is not None:
            shown = " ".join(f"{k}={_format(v)}" for k, v in values.items())
            self._print(f"[{self.role}] step={step} {shown}")

    def _follow_replaced_file(self) -> None:
        """Reopens the JSONL file when another logger of the run replaced it (its purge on resume).

        Every role appends to one file; a purge writes a new file and renames it
        over the old one, and a handle opened before that would go on writing
        into the old, unlinked file, where every line is lost.
        """
        try:
            current = os.stat(self.jsonl_path).st_ino
        except FileNotFoundError:
            current = None
        if current != os.fstat(self._jsonl.fileno()).st_ino:
            self._jsonl.close()
            self._jsonl = open(self.jsonl_path, "a", encoding="utf-8")

    def write_text(self, name: str, markdown: str, step: int = 0) -> None:
        """A TensorBoard text summary (rendered as Markdown in its Text tab); no JSONL line."""
        if self._writer is not None:
            self._writer.text(name, markdown, int(step))
            self._writer.flush()

    def write_image(self, name: str, image, step: int) -> None:
        """One uint8 image ``[H, W, C]`` (C = 1 or 3) in TensorBoard's Images tab."""
        if self._writer is None:
            return
        self._writer.image(name, np.asarray(image, np.uint8), int(step))
        self._writer.flush()

    def write_gif(self, name: str, gif: bytes, step: int) -> None:
        """An animated GIF as a TensorBoard image summary (its Images tab plays it)."""
        if self._writer is None:
            return
        from PIL import Image  # pylint: disable=g-import-not-at-top

        with Image.open(io.BytesIO(gif)) as image:
            width, height = image.size
        self._writer.encoded_image(name, gif, width, height, int(step))
        self._writer.flush()

    def flush(self) -> None:
        if self._writer is not None:
            self._writer.flush()
        if self._jsonl is not None:
            self._jsonl.flush()

    def close(self) -> None:
        """Flushes and closes the files; further writes fail."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._jsonl is not None:
            self._jsonl.close()
            self._jsonl = None

    def __enter__(self) -> "MetricsLogger":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def make_logger(logdir: str, role: str, *, console: bool = False,
                purge_after_step: Optional[int] = None, **kwargs) -> MetricsLogger:
    """The standard logger for ``role``: TensorBoard + ``metrics.jsonl`` (+ console)."""
    return MetricsLogger(logdir, role, console=console, purge_after_step=purge_after_step, **kwargs)


def config_markdown(config: Mapping[str, Any], prefix: str = "") -> str:
    """A run's config as a two-column Markdown table, nested keys joined by dots.

    What TensorBoard's Text tab shows next to the curves, so a plot and the
    settings that made it are read in one place.
    """
    rows = []

    def walk(mapping: Mapping[str, Any], path: str) -> None:
        for key in sorted(mapping):
            value, name = mapping[key], f"{path}{key}"
            if isinstance(value, Mapping) and value:
                walk(value, name + ".")
            else:
                shown = json.dumps(value) if not isinstance(value, str) else value
                rows.append(f"| `{name}` | {shown.replace('|', '&#124;')} |")

    walk(config, prefix)
    return "\n".join(["| setting | value |", "|---|---|", *rows])


def read_jsonl(path: str, role: Optional[str] = None, warn: bool = True) -> "list[Dict[str, Any]]":
    """The records of a metrics file (optionally one role's), skipping damaged lines.

    A torn last line is what a live run is writing: skipped without a word.
    A damaged line before it (garbage, a crash of an older writer) is
    skipped with one warning on stderr that names it, when ``warn``.
    """
    records: "list[Dict[str, Any]]" = []
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return records
    lines = data.split(b"\n")
    damaged = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            if number < len(lines):  # the last piece has no newline yet: being written
                damaged.append(number)
            continue
        if not isinstance(record, dict):
            damaged.append(number)
        elif role is None or record.get("role") == role:
            records.append(record)
    if damaged and warn:
        shown = ", ".join(str(n) for n in damaged[:5]) + (" ..." if len(damaged) > 5 else "")
        sys.stderr.write(f"rlplat: warning: {path}: skipped {len(damaged)} damaged line(s) (line "
                         f"{shown}); the other records are read\n")
    return records


def purge_jsonl(path: str, role: str, after_step: int) -> int:
    """Drops ``role``'s records with ``step > after_step`` (and damaged lines); returns how many."""
    if not os.path.exists(path):
        return 0
    kept, dropped = [], 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                dropped += line.strip() != ""
                continue
            if record.get("role") == role and record.get("step", -1) > after_step:
                dropped += 1
            else:
                kept.append(line if line.endswith("\n") else line + "\n")
    if dropped:
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.writelines(kept)
        os.replace(tmp, path)  # atomic: a crash leaves the old or the new file
    return dropped


def _ends_with_newline(path: str) -> bool:
    with open(path, "rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"


def _to_python(value: Any) -> Any:
    if callable(getattr(value, "numpy", None)):  # an eager tensor or variable, without importing TF
        value = value.numpy()
    if isinstance(value, np.ndarray):
        if value.size != 1:
            raise ValueError(f"metrics must be scalars, got an array of shape {value.shape}")
        value = value.reshape(()).item()
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    return value


def _format(value: Any) -> str:
    if isinstance(value, float) and math.isfinite(value):
        return f"{value:.4g}"
    return str(value)
