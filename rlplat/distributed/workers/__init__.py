"""The workers of a distributed run, one module per role, as plain classes Ray turns into actors.

Each class is ordinary Python (so it can be built and tested in one process);
``remote(cls, **options)`` makes the Ray actor class. Workers receive
FACTORIES (the builder, an environment name) and addresses, never live
objects: everything that holds a thread, a socket or a TF variable is made
inside the worker's own process.

Import discipline: no module here imports TensorFlow, Reverb or
dm_control at the top: a worker's ``__init__`` sizes TF's thread pools and
hides GPUs (``process.setup_worker``) before anything builds TF state; heavy
modules are imported after that.

Ray calls are for control only: an ``ActorWorker`` runs a whole chunk of
environment steps per call, a ``LearnerWorker`` a chunk of learner steps.
"""

from rlplat.distributed.workers.actor import ActorWorker
from rlplat.distributed.workers.common import UNBOUND_SOURCE, node_ip, remote
from rlplat.distributed.workers.evaluator import Evaluator
from rlplat.distributed.workers.learner import LearnerWorker
from rlplat.distributed.workers.replay import ReplayServer

__all__ = ["ActorWorker", "Evaluator", "LearnerWorker", "ReplayServer", "UNBOUND_SOURCE", "node_ip", "remote"]
