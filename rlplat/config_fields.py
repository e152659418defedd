"""Type checks shared by the agents' frozen config dataclasses (no TensorFlow).

Each check raises a one-line ValueError in the config's own field names (the
command line spells them as flags, ``rlplat.launch.common.as_flags``). Checks
that normalise a value (ints to float, lists to tuples) write it back with
``object.__setattr__``, as a frozen dataclass's ``__post_init__`` must.

A config may declare each field with its flag's help text (``field``), so the
text lives beside the default and ``flag_helps`` gives the agent's flags.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Dict, Iterable, Optional

# The learners compute in float32 and count in int64: a value outside these
# ranges would become inf or wrap there, whatever float64 and Python allow.
FLOAT32_MAX = 3.4028234663852886e38
INT64_MAX = 2**63 - 1


class ConfigMethods:
    """What every frozen agent config shares: a validated ``replace`` and a JSON-ready ``to_dict``."""

    def replace(self, **changes: Any) -> Any:
        """A validated copy with ``changes`` applied.

        Raises:
          TypeError: a key is not a field (as the constructor would).
          ValueError: a new value is invalid.
        """
        names = {f.name for f in dataclasses.fields(self)}  # type: ignore[arg-type]
        unknown = sorted(set(changes) - names)
        if unknown:
            raise TypeError(f"unknown {type(self).__name__} field(s) {unknown}; valid fields: {sorted(names)}")
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]

    def to_dict(self) -> Dict[str, Any]:
        """Plain JSON values (tuples become lists); ``type(cfg)(**cfg.to_dict())`` round-trips."""
        return {k: list(v) if isinstance(v, tuple) else v
                for k, v in dataclasses.asdict(self).items()}  # type: ignore[call-overload]


def field(default: Any, help: str, kind: Optional[type] = None, shown: Optional[str] = None) -> Any:
    """A dataclass field with a default and the help text of its command-line flag.

    ``kind`` is the flag's type where the default cannot tell it (a default of
    None); ``shown`` replaces the default in ``--help`` where the default
    depends on the run (e.g. on the task).
    """
    metadata: Dict[str, Any] = {"help": help}
    if kind is not None:
        metadata["kind"] = kind
    if shown is not None:
        metadata["shown"] = shown
    return dataclasses.field(default=default, metadata=metadata)


def precision_field(bf16_parity: bool) -> Any:
    """An agent config's ``precision`` field (``rlplat.precision``: fp32, bf16 or auto; default fp32).

    ``bf16_parity``: the agent's bf16 learner step is shown to match its fp32 step (a test in the agent's
    tests), so ``auto`` may pick bf16 for it; the value lives in the field's metadata.
    """
    from rlplat import precision  # pylint: disable=g-import-not-at-top  (no TF; avoids an import cycle)

    text = precision.FLAG_HELP if bf16_parity else precision.FLAG_HELP_NO_PARITY  # --help tells what auto does
    return dataclasses.field(default="fp32", metadata={"help": text, "bf16_parity": bool(bf16_parity)})


def check_precision(config: Any) -> None:
    """The config's ``precision`` is one of ``rlplat.precision.PRECISIONS`` (one line, in the field's name)."""
    from rlplat import precision  # pylint: disable=g-import-not-at-top

    precision.check(config)


def flag_helps(config_cls: type) -> Dict[str, str]:
    """Field name -> help text of every field declared with ``field``, in order (the agent's config flags)."""
    return {f.name: f.metadata["help"] for f in dataclasses.fields(config_cls) if "help" in f.metadata}


def check_ints(config: Any, names: Iterable[str]) -> None:
    """Each field is an int (bool, an int subclass, is refused)."""
    for name in names:
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{name} must be an integer (got {value!r}); "
                             f"set {name} to a whole number")
        if abs(value) > INT64_MAX:
            raise ValueError(f"{name} must fit in 64 bits (got {value}); set {name} to at most "
                             f"{INT64_MAX}")


def check_floats(config: Any, names: Iterable[str]) -> None:
    """Each field is a finite number; stored as float so equality and to_dict are stable."""
    for name in names:
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{name} must be a number (got {value!r}); "
                             f"set {name} to a finite number")
        if not math.isfinite(value):
            raise ValueError(f"{name} must be finite (got {value!r}); "
                             f"set {name} to a finite number")
        if abs(value) > FLOAT32_MAX:
            raise ValueError(f"{name} is beyond float32's range (got {value!r}), where the learner "
                             f"computes; set {name} to a finite float32 (|x| <= 3.4e38)")
        object.__setattr__(config, name, float(value))


def check_layer_sizes(config: Any, names: Iterable[str], example: str) -> None:
    """Each field is a non-empty sequence of positive ints, stored as a tuple.

    Lists (e.g. from JSON or ``to_dict``) are accepted; tuples keep the config
    hashable and immutable. ``example`` is shown in the fix (e.g. "256,256").
    """
    for name in names:
        value = getattr(config, name)
        if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
            raise ValueError(f"{name} must be a sequence of positive ints "
                             f"(got {value!r}); set {name} like {example}")
        sizes = tuple(value)
        if not sizes or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in sizes):
            raise ValueError(f"{name} must be a non-empty sequence of positive ints "
                             f"(got {value!r}); set {name} like {example}")
        object.__setattr__(config, name, sizes)
