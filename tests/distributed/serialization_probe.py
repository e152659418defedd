"""A Ray actor class for test_ray_serialization: which of Ray's addon libraries its process imported."""

import sys

from rlplat.distributed.workers import common  # noqa: F401  (as every worker's module does)


class Probe:
    """Answers what its process imported, after reading an argument (which builds Ray's serialization context)."""

    def modules(self, names):
        return {name: name in sys.modules for name in names}
