"""Flags -> frozen configs -> runs: the ``rlplat`` command line.

``cli.main`` builds one argparse parser from a registry of command modules
(``cli.COMMANDS``); ``train`` and ``sweep`` offer the agents registered
under the ``rlplat.agents`` entry points (``rlplat.agent_spec``), one
sub-command per spec (``agent_command``). A command module defines ``NAME``, ``HELP``,
``add_arguments(parser)`` and ``run(args) -> exit code``, and imports nothing
heavy at module level, so parsing (and every usage error) stays fast and
TensorFlow is configured before it starts.
"""
