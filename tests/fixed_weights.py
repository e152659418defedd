"""A variable source for actor tests: the same policy weights at one version, every time."""

from rlplat import core


class FixedWeights(core.VariableSource):
    """Serves ``arrays`` as ``"policy"`` at ``version``."""

    def __init__(self, arrays, version=1):
        self.arrays, self.version = arrays, version

    def get_variables(self, names):
        return self.version, {"policy": self.arrays}
