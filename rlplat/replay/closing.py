"""`with adder:` support shared by the adders: close on exit, never mask an error."""

from __future__ import annotations


class ClosesOnExit:
    """Mixin for objects with `close()` that flushes (and may time out)."""

    def close(self) -> None:  # pragma: no cover - always overridden
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
            return
        try:  # Do not mask the original exception with a flush timeout.
            self.close()
        except Exception:  # pylint: disable=broad-except
            pass
