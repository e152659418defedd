"""rlplat: a Ray-based actor-learner platform for RL research, on tf.distribute."""

import time as _time

# Wall clock of this process's first rlplat import: when an `rlplat` command's own code began
# (``startup_times.command_start_time``).
IMPORTED_AT = _time.time()
