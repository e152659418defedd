"""The command line's one mapping from library field names to flags (``common.as_flags``)."""

from rlplat.launch import common


def test_field_names_become_flags_and_nothing_else_does():
    message = "num_actors 3 is not a multiple of num_replay_shards 2; seeds and num_actors_total stay"
    assert common.as_flags(message, {"num_actors", "num_replay_shards", "seed"}) == (
        "--num-actors 3 is not a multiple of --num-replay-shards 2; seeds and num_actors_total stay")


def test_a_renamed_field_takes_its_flag_and_a_flag_is_not_mapped_twice():
    assert common.as_flags("eval_every_s must be > 0", {"eval_every_s"}, {"eval_every_s": "--eval-period"}) == (
        "--eval-period must be > 0")
    assert common.as_flags("--num-actors and num_actors", {"num_actors"}) == "--num-actors and --num-actors"
    assert common.as_flags("nothing to map", set()) == "nothing to map"
