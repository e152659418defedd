"""rlplat: a Ray-based actor-learner platform for RL research, on tf.distribute."""
