"""``rlplat.precision``: how ``auto`` resolves from /proc/cpuinfo flags, the device and the agent's parity."""

import dataclasses

import pytest

from rlplat import precision

# Trimmed /proc/cpuinfo texts: two x86 CPUs with bfloat16 (AVX-512 BF16 only; AMX), one without, one ARM.
ICELAKE = "processor\t: 0\nmodel name\t: Intel Xeon\nflags\t\t: fpu sse avx2 avx512f avx512bw avx512_vnni\n"
COOPER_LAKE = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_vnni avx512_bf16\n"
SAPPHIRE_RAPIDS = "processor\t: 0\nflags\t\t: fpu avx512f avx512_bf16 amx_bf16 amx_tile amx_int8\n\n" \
                  "processor\t: 1\nflags\t\t: fpu avx512f avx512_bf16 amx_bf16 amx_tile amx_int8\n"
AMX_ONLY = "processor\t: 0\nflags\t\t: fpu avx512f amx_bf16 amx_tile\n"
GRAVITON3 = "processor\t: 0\nFeatures\t: fp asimd sve bf16 i8mm\n"
# A flag that merely contains the name must not count.
LOOKALIKE = "processor\t: 0\nflags\t\t: fpu xavx512_bf16 amx_bf16x\n"


@pytest.mark.parametrize("cpuinfo, want", [
    (ICELAKE, "fp32"), (COOPER_LAKE, "bf16"), (SAPPHIRE_RAPIDS, "bf16"), (AMX_ONLY, "bf16"),
    (GRAVITON3, "fp32"), (LOOKALIKE, "fp32"), ("", "fp32")])
def test_auto_picks_bf16_only_on_a_cpu_whose_flags_show_bfloat16(cpuinfo, want):
    got = precision.resolve("auto", bf16_parity=True, cpuinfo=cpuinfo)
    assert (got.requested, got.precision) == ("auto", want)
    if want == "bf16":
        assert "avx512_bf16" in got.reason or "amx_bf16" in got.reason
    else:
        assert "no bfloat16" in got.reason


def test_auto_keeps_fp32_on_a_gpu_and_for_an_agent_without_parity():
    assert precision.resolve("auto", bf16_parity=True, gpu=True, cpuinfo=SAPPHIRE_RAPIDS).precision == "fp32"
    unshown = precision.resolve("auto", bf16_parity=False, cpuinfo=SAPPHIRE_RAPIDS)
    assert unshown.precision == "fp32" and "parity" in unshown.reason


@pytest.mark.parametrize("asked", ["fp32", "bf16"])
def test_an_explicit_precision_is_kept_whatever_the_machine(asked):
    for cpuinfo, gpu, parity in ((ICELAKE, False, False), (SAPPHIRE_RAPIDS, True, True)):
        got = precision.resolve(asked, bf16_parity=parity, gpu=gpu, cpuinfo=cpuinfo)
        assert (got.requested, got.precision) == (asked, asked)


def test_the_console_line_and_the_record():
    got = precision.resolve("auto", bf16_parity=True, cpuinfo=COOPER_LAKE)
    line = got.line("D4PG")
    assert "\n" not in line and line.startswith("precision: D4PG learner in bf16 (auto: ")
    assert got.to_dict() == {"requested": "auto", "precision": "bf16", "reason": got.reason}
    asked = precision.resolve("fp32", bf16_parity=True)
    assert asked.line("DDPG") == "precision: DDPG learner in fp32 (fp32: as set)"  # set by the flag or by default


def test_a_bad_value_is_refused_naming_the_field():
    @dataclasses.dataclass(frozen=True)
    class Config:
        precision: str = "fp16"

    with pytest.raises(ValueError, match=r"^precision must be one of auto, fp32, bf16 \(got 'fp16'\); "
                                         r"set precision auto, fp32 or bf16$"):
        precision.check(Config())
    with pytest.raises(ValueError, match="set precision auto"):
        precision.resolve("float16", bf16_parity=True)


def test_cpu_flags_reads_this_machine_without_failing():
    assert isinstance(precision.cpu_flags(), frozenset)  # empty where /proc/cpuinfo is missing


def test_an_agent_declares_its_parity_in_its_precision_field():
    from rlplat import config_fields  # pylint: disable=g-import-not-at-top

    @dataclasses.dataclass(frozen=True)
    class Shown:
        precision: str = config_fields.precision_field(bf16_parity=True)

    @dataclasses.dataclass(frozen=True)
    class Unshown:
        precision: str = config_fields.precision_field(bf16_parity=False)

    @dataclasses.dataclass(frozen=True)
    class NoField:
        lr: float = 1e-3

    assert precision.bf16_parity(Shown()) and not precision.bf16_parity(Unshown())
    assert precision.for_config(Shown("auto"), cpuinfo=COOPER_LAKE).precision == "bf16"
    assert precision.for_config(Unshown("auto"), cpuinfo=COOPER_LAKE).precision == "fp32"
    assert precision.for_config(NoField()) is None and precision.for_config(None) is None
    assert config_fields.flag_helps(Shown)["precision"] == precision.FLAG_HELP
