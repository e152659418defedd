"""The Ray layer: the ONLY package of rlplat that imports ``ray``.

Modules (small, one concern each):

- ``cluster``: ``connect(address)``: a local Ray instance bound to loopback, or
  an existing cluster; unreachable addresses fail fast with the fix named.
- ``seeding``: per-role seeds derived from one global seed (no Ray import).
- ``resources``: how many CPUs/GPUs each role asks Ray for.
- ``process``: environment variables and TensorFlow threads for a worker
  process, set before TensorFlow starts.
- ``variables``: ``RemoteVariableSource`` (a learner's Ray handle seen as a
  ``core.VariableSource``).
- ``workers``: the workers (``ReplayServer``, ``ActorWorker``,
  ``LearnerWorker``, ``Evaluator``, ``Counter``) as plain classes, and
  ``remote(cls, ...)`` to make Ray actors of them.
- ``driver`` (with ``driver_*``): the driver behind ``rlplat.runners.run_on_ray``;
  ``layout_config``: its ``RayLayoutConfig`` (Ray-free).

Importing this package imports neither Ray nor TensorFlow; import the module
you need.
"""
