"""Agents built on the rlplat core: one folder per agent (config, networks, losses, learning)."""
