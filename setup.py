"""Package discovery that pyproject.toml cannot express: folders installed under other names.

The repository keeps the design card's folders ``agents/`` and ``envs/``,
but installs them as ``rlplat_agents`` and ``rlplat_envs``, so nothing puts
the generic names ``agents`` or ``envs`` into site-packages. A new agent
folder is found here without editing anything.
"""

from setuptools import find_packages, setup

FOLDER_PACKAGES = {"agents": "rlplat_agents", "envs": "rlplat_envs"}


def _packages():
    found = find_packages(include=["rlplat", "rlplat.*"])
    for folder, package in FOLDER_PACKAGES.items():
        found += [package + name[len(folder):] for name in find_packages(include=[folder, folder + ".*"])]
    return found


if __name__ == "__main__":  # how pip's build backend runs it; importing it (tests) builds nothing
    setup(packages=_packages(), package_dir={package: folder for folder, package in FOLDER_PACKAGES.items()})
