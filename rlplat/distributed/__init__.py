"""The Ray layer: with ``rlplat.runners`` (which places runs on it), the only package of rlplat that imports ``ray``.

Modules (small, one concern each):

- ``cluster``: ``connect(address)``: a local Ray instance bound to loopback, or
  an existing cluster; unreachable addresses fail fast with the fix named.
- ``resources``: how many CPUs/GPUs each role asks Ray for.
- ``process``: environment variables and TensorFlow threads for a worker
  process, set before TensorFlow starts.
- ``variables``: ``RemoteVariableSource`` (a learner's Ray handle seen as a
  ``core.VariableSource``).
- ``workers``: the workers, one module per role (``ReplayServer``,
  ``ActorWorker``, ``LearnerWorker``, ``Evaluator``) as plain classes, and
  ``remote(cls, ...)`` to make Ray actors of them; ``learner_service``: the
  Protocol a learner answers over Ray.
- ``driver`` (with ``driver_*``): the driver behind ``rlplat.runners.run_on_ray``;
  ``layout_config``: its ``RayLayoutConfig`` (Ray-free).

Importing this package imports neither Ray nor TensorFlow; import the module
you need.
"""
