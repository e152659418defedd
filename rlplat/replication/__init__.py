"""The replication core: write a step for one replica, run it on many.

    repl = make_replicator(num_replicas=2)
    with repl.scope():
        model, optimizer = make_model(), tf.keras.optimizers.Adam()
    batches = repl.distribute(input_fn)
    metrics = repl.run(step_fn, next(batches))

See `replicator.py` for the gradient convention and `primitives.py` for the
cross-replica operations available inside a step.
"""

from rlplat.replication.devices import (ReplicationError, configure_cpu_replicas, make_strategy,
                                        runtime_started)
from rlplat.replication.primitives import all_gather, all_reduce, broadcast, num_replicas, replica_id
from rlplat.replication.replicator import Replicator, make_replicator, wrap_optimizer

__all__ = [
    "Replicator", "ReplicationError", "make_replicator", "make_strategy", "configure_cpu_replicas", "runtime_started",
    "wrap_optimizer", "all_reduce", "all_gather", "broadcast", "replica_id", "num_replicas",
]
