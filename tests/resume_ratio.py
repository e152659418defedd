"""Whether a resumed run's learner stayed at the replay ratio, from the run's own records.

The driver's ``learner`` records carry the learner step and the replay
server's completed inserts and samples; its ``replay_restore`` event (with
``--replay-checkpoint``) the counts the server started from. Reverb's
``SampleToInsertRatio`` keeps ``error = spi * inserts - samples`` at or above
``spi * min_size - buffer`` for every sample, and every learner step needs a
global batch of samples, so after the resume

    (learner steps) * batch <= samples - samples0
                            <= spi * (inserts - inserts0) + error0 - spi * min_size + buffer

where ``error0 = spi * inserts0 - samples0`` (0 for an empty, new server:
the warm-up then costs ``min_size`` inserts). A catch-up burst (the learner
stepping on an empty or restored replay faster than actors insert) breaks it.
"""

import math


def check_no_catch_up_burst(records, *, restored_step, spi, min_size, buffer, batch,
                            inserts0=0, samples0=0):
    """Asserts the bound above for every learner record (in order); returns the last record."""
    records = [r for r in records if "replay_inserts" in r]
    assert records, "no learner record with replay counts after the resume"
    error0 = spi * inserts0 - samples0
    for r in records:
        inserted = r["replay_inserts"] - inserts0
        allowed = math.floor((spi * inserted + error0 - spi * min_size + buffer) / batch) + 1
        steps = r["step"] - restored_step
        assert steps <= max(allowed, 0), (
            f"learner ran {steps} steps after the resume on {inserted} new inserts; the ratio "
            f"{spi:g} allows {allowed} (record {r})")
    return records[-1]
