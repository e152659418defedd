"""The learners' arithmetic precision: ``fp32``, ``bf16`` (mixed) or ``auto``.

``bf16`` is mixed precision: the networks' dense layers multiply in bfloat16
(``rlplat.utils.bf16_dense.BF16Dense``, forward and backward products);
their variables, the optimizers' slots, every loss, the categorical
projection and all reductions stay float32. It is chosen layer by layer,
never through Keras' process-global policy, so an fp32 and a bf16 network
can live in one process (tests, benches), and actors, evaluators and
exported weights see float32 only. No loss scale is needed: bfloat16 keeps
float32's exponent range, only the mantissa is shorter.

``auto`` resolves to bf16 only where it is known to pay and to be correct:

- the learner runs on a CPU (on a GPU a step this small is bound by kernel
  launches, and a bf16 proxy ran slower there; see issue 31), and
- the CPU's flags show bfloat16 arithmetic (``avx512_bf16`` or ``amx_bf16``
  in /proc/cpuinfo); without them oneDNN emulates bf16 and is slower, and
- the agent's bf16 step is shown to match its fp32 step (its config declares
  ``precision = config_fields.precision_field(bf16_parity=True)`` and a test
  in tests/agents/<agent> shows it).

This module imports no TensorFlow: configs and the CLI use ``PRECISIONS`` and
``check``; the layers are in ``rlplat.utils.bf16_dense``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

PRECISIONS = ("auto", "fp32", "bf16")
_FLAG_CHOICES = ("learner arithmetic: fp32, bf16 (mixed: bfloat16 matrix products; float32 weights, activations, "
                 "optimizer and losses) or auto")
#: The help text of each agent's ``precision`` field (its ``--precision`` flag).
FLAG_HELP = _FLAG_CHOICES + " (bf16 on a CPU with bfloat16 instructions, else fp32)"
#: The same for an agent that declares no bf16 parity, whose ``auto`` is always fp32 (``resolve``).
FLAG_HELP_NO_PARITY = _FLAG_CHOICES + " (fp32: this agent's bf16 parity is not shown)"
# /proc/cpuinfo flags that mean native bfloat16 arithmetic (AVX-512 BF16 dot products, AMX tiles).
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")
_CPUINFO = "/proc/cpuinfo"


def check(config: Any, name: str = "precision") -> None:
    """Refuses a config field ``name`` that is not one of ``PRECISIONS`` (one line, in the field's name;
    the command line shows it as the flag)."""
    value = getattr(config, name)
    if value not in PRECISIONS:
        raise ValueError(f"{name} must be one of {', '.join(PRECISIONS)} (got {value!r}); "
                         f"set {name} auto, fp32 or bf16")


def cpu_flags(cpuinfo: Optional[str] = None) -> frozenset:
    """The CPU feature flags in ``cpuinfo`` (the text of /proc/cpuinfo; read from there when None).

    An unreadable file (not Linux) gives no flags, so ``auto`` stays fp32.
    """
    if cpuinfo is None:
        try:
            with open(_CPUINFO, encoding="utf-8", errors="replace") as f:
                cpuinfo = f.read()
        except OSError:
            return frozenset()
    flags: set = set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):  # x86 / ARM spelling
            flags.update(value.split())
    return frozenset(flags)


@dataclasses.dataclass(frozen=True)
class Resolved:
    """What a ``precision`` setting became, and why (the console line and run_info record it).

    Attributes:
      requested: the setting: auto, fp32 or bf16.
      precision: what the learner computes in: fp32 or bf16.
      reason: a short clause saying why.
    """

    requested: str
    precision: str
    reason: str

    def line(self, agent: str) -> str:
        """The one console line, e.g. ``precision: bf16 (auto: CPU has avx512_bf16, D4PG bf16 parity shown)``."""
        how = self.reason if self.requested == "auto" else "as set"
        return f"precision: {agent} learner in {self.precision} ({self.requested}: {how})"

    def to_dict(self) -> dict:
        """For run_info.json."""
        return dataclasses.asdict(self)


def resolve(requested: str, *, bf16_parity: bool, gpu: bool = False,
            cpuinfo: Optional[str] = None) -> Resolved:
    """Resolves ``requested`` (``PRECISIONS``) for a learner.

    Args:
      requested: auto, fp32 or bf16; fp32 and bf16 are kept as they are.
      bf16_parity: the agent's bf16 step is shown to match fp32 (its spec says so).
      gpu: the learner computes on a GPU.
      cpuinfo: the text of /proc/cpuinfo (read from the machine when None).

    Raises:
      ValueError: ``requested`` is not one of ``PRECISIONS``.
    """
    if requested not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)} (got {requested!r}); "
                         "set precision auto, fp32 or bf16")
    if requested != "auto":
        return Resolved(requested, requested, "as set")
    if gpu:
        return Resolved("auto", "fp32", "GPU learner: a step this small is launch-bound, bf16 not measured faster")
    if not bf16_parity:
        return Resolved("auto", "fp32", "this agent's bf16 parity is not shown")
    found = [f for f in BF16_CPU_FLAGS if f in cpu_flags(cpuinfo)]
    if not found:
        return Resolved("auto", "fp32", "the CPU has no bfloat16 instructions (no avx512_bf16 or amx_bf16)")
    return Resolved("auto", "bf16", f"CPU has {' and '.join(found)}, bf16 parity shown")


def bf16_parity(config: Any) -> bool:
    """Whether the agent of ``config`` declares its bf16 step parity (``config_fields.precision_field``)."""
    field = next((f for f in dataclasses.fields(config) if f.name == "precision"), None)
    return bool(field is not None and field.metadata.get("bf16_parity"))


def for_config(config: Any, *, gpu: bool = False, cpuinfo: Optional[str] = None) -> Optional[Resolved]:
    """``resolve`` of an agent config's ``precision``; None for a config without the field. The driver
    calls it to report what its learner will do (same function, same flags: on one host the two agree)."""
    if config is None or not hasattr(config, "precision"):
        return None
    return resolve(config.precision, bf16_parity=bf16_parity(config), gpu=gpu, cpuinfo=cpuinfo)


def agent_label(config: Any) -> str:
    """``D4PGConfig`` -> ``D4PG``: the agent's name in the console line."""
    name = type(config).__name__
    return name[:-len("Config")] if name.endswith("Config") else name
