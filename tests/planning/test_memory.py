"""The memory estimate per strategy: the ZeRO paper's numbers, activations, and the suggestion."""

from __future__ import annotations

import pytest

from scaletrain.clusters.catalog import load_profile
from scaletrain.core.errors import ScaletrainError
from scaletrain.planning.memory import (
    ModelSize,
    activation_bytes,
    estimate_memory,
    parse_count,
)
from scaletrain.planning.planner import plan_job
from scaletrain.planning.request import Request

GB = 1e9


def test_deepspeed_stages_reproduce_the_zero_paper() -> None:
    # Rajbhandari et al. 2020, figure 1: 7.5 B parameters, 64 GPUs, mixed-precision Adam:
    # 120 GB without ZeRO, 31.4 GB with stage 1, 16.6 GB with stage 2, 1.9 GB with stage 3.
    size = ModelSize(parameters=int(7.5e9))
    gpus = {"world_size": 64, "gpus_per_node": 8, "gpu_memory_gb": 80}
    states = {
        strategy: estimate_memory(size, strategy, **gpus).model_states_gb
        for strategy in ("zero1", "zero2", "zero3")
    }
    assert states == pytest.approx({"zero1": 31.4, "zero2": 16.6, "zero3": 1.875}, abs=0.05)


def test_ddp_keeps_everything_and_hsdp_shards_within_a_node() -> None:
    size = ModelSize(parameters=10**9)
    gpus = {"world_size": 16, "gpus_per_node": 8, "gpu_memory_gb": 64}
    ddp = estimate_memory(size, "ddp", **gpus)
    hsdp = estimate_memory(size, "hsdp", **gpus)
    fsdp = estimate_memory(size, "fsdp", **gpus)
    assert ddp.model_states_gb == pytest.approx(20.0)  # 4 + 4 + 4 (buckets) + 8 bytes
    assert hsdp.model_states_gb == pytest.approx(16 / 8)  # sharded over the node's 8 GPUs
    assert fsdp.model_states_gb == pytest.approx(16 / 16)


def test_activations_of_a_transformer_with_and_without_recomputation() -> None:
    # Korthikanti et al. 2022: 34·s·b·h bytes per layer in 16 bits (no attention scores kept).
    size = ModelSize(parameters=10**9, layers=24, width=2048, sequence_length=2048, micro_batch=4)
    assert activation_bytes(size) == 34 * 2048 * 4 * 2048 * 24
    recomputed = ModelSize(
        parameters=10**9,
        layers=24,
        width=2048,
        sequence_length=2048,
        micro_batch=4,
        activation_checkpointing=True,
    )
    # Each layer keeps its 2-byte input; one layer's activations exist while recomputed.
    assert activation_bytes(recomputed) == 2048 * 4 * 2048 * (2 * 24 + 34)
    assert activation_bytes(ModelSize(parameters=10**9)) is None  # shape unknown
    for unknown in ("layers", "width", "sequence_length"):
        shape = {"layers": 24, "width": 2048, "sequence_length": 2048, unknown: None}
        assert activation_bytes(ModelSize(parameters=10**9, **shape)) is None, unknown
    # fp32 training keeps 4-byte activations: twice the 16-bit bytes.
    fp32 = ModelSize(
        parameters=10**9, layers=24, width=2048, sequence_length=2048, micro_batch=4,
        precision="fp32",
    )  # fmt: skip
    assert activation_bytes(fp32) == 2 * 34 * 2048 * 4 * 2048 * 24


def test_fully_sharded_strategies_hold_two_gathered_blocks() -> None:
    # 1 B parameters in 20 layers on 16 GPUs: each GPU keeps its 16 bytes / 16 of every
    # parameter, and while a block runs, it and the next are whole: 2 × 50 M parameters, in
    # 16 bits (bf16) or 32 bits (fp32).
    gpus = {"world_size": 16, "gpus_per_node": 8, "gpu_memory_gb": 64}
    bf16 = ModelSize(parameters=10**9, layers=20)
    fp32 = ModelSize(parameters=10**9, layers=20, precision="fp32")
    states = {
        (strategy, size.precision): estimate_memory(size, strategy, **gpus).model_states_gb
        for strategy in ("ddp", "fsdp", "zero1", "zero3")
        for size in (bf16, fp32)
    }
    assert states == pytest.approx(
        {
            ("ddp", "bf16"): 20.0, ("ddp", "fp32"): 20.0,  # nothing sharded, nothing gathered
            ("fsdp", "bf16"): 1.0 + 0.2, ("fsdp", "fp32"): 1.0 + 0.4,
            ("zero1", "bf16"): 4 + 12 / 16, ("zero1", "fp32"): 8 + 12 / 16,  # fp32 copy kept
            ("zero3", "bf16"): 1.0 + 0.2, ("zero3", "fp32"): 1.25 + 0.4,
        }
    )  # fmt: skip


def test_the_total_is_model_states_and_activations_and_fits_within_85_percent() -> None:
    mahti = {"world_size": 4, "gpus_per_node": 4, "gpu_memory_gb": 40}
    # Without the model's shape the total is its states alone: 1.7 B × 20 bytes under DDP
    # is 34 GB, just the 85 % of an A100's 40 GB that tensors can use.
    exactly = estimate_memory(ModelSize(parameters=1_700_000_000), "ddp", **mahti)
    assert (exactly.total_gb, exactly.model_states_gb, exactly.fits) == (34.0, 34.0, True)
    over = estimate_memory(ModelSize(parameters=1_700_000_001), "ddp", **mahti)
    assert over.fits is False
    shaped = ModelSize(parameters=10**9, layers=24, width=2048, sequence_length=2048, micro_batch=4)
    both = estimate_memory(shaped, "ddp", **mahti)
    activations = 34 * 2048 * 4 * 2048 * 24 / GB
    assert both.activations_gb == pytest.approx(activations)
    assert both.total_gb == pytest.approx(20.0 + activations)


def plan(gpus: int | None, size: ModelSize, cluster: str = "lumi", **request: object):  # type: ignore[no-untyped-def]
    return plan_job(
        Request(
            cluster=cluster, script="train.py", time="1:00:00", gpus=gpus, model=size, **request
        ),  # type: ignore[arg-type]
        load_profile(cluster, {}),
    )


def test_plan_suggests_ddp_when_it_fits_and_hsdp_across_nodes_otherwise() -> None:
    small = plan(16, ModelSize(parameters=int(124e6)))
    assert small.suggested_strategy == "ddp"
    seven_b = ModelSize(parameters=7 * 10**9, layers=32, width=4096, sequence_length=2048)
    large = plan(16, seven_b, global_batch_size=64)
    assert [estimate.fits for estimate in large.memory_estimates][:3] == [False, True, True]
    assert large.suggested_strategy == "hsdp"  # 2 nodes: only gradients cross between them
    assert plan(8, seven_b, global_batch_size=32).suggested_strategy == "fsdp"  # one node
    # On one node too, a model that fits whole keeps DDP: sharding it would only add traffic.
    assert plan(8, ModelSize(parameters=int(124e6))).suggested_strategy == "ddp"
    assert large.gpu_peak_tflops == 191.5 and large.gpu_memory_gb == 64
    # A global batch of 64 over 16 GPUs is 4 samples per GPU in each forward pass.
    assert large.memory_estimates[0].activations_gb == pytest.approx(34 * 2048 * 4 * 4096 * 32 / GB)


def test_plan_says_how_many_gpus_a_model_that_does_not_fit_needs() -> None:
    huge = plan(16, ModelSize(parameters=70 * 10**9))
    assert huge.suggested_strategy is None
    assert huge.warnings == (
        "A model of 70,000,000,000 parameters does not fit on 16 GPUs of 64 GB even with "
        "FSDP; try --gpus 24.",
    )


def test_a_model_that_does_not_fit_gets_the_fixes_that_would_help() -> None:
    # One LUMI node: FSDP needs 70 B × 16 bytes / N ≤ 0.85 × 64 GB per GCD, N ≥ 21: 3 nodes.
    assert plan(8, ModelSize(parameters=70 * 10**9)).warnings == (
        "A model of 70,000,000,000 parameters does not fit on 8 GPUs of 64 GB even with "
        "FSDP; try --gpus 24.",
    )
    # 7 B in 32 layers of width 4096, 4096 tokens, 2 samples per GPU (4 over 2 GPUs): 36.5 GB
    # of activations; FSDP's 112 GB of states fit beside them on 8 GPUs, not on 6.
    shape = {"parameters": 7 * 10**9, "layers": 32, "width": 4096, "sequence_length": 4096}
    two_gpus = {"nodes": 1, "gpus_per_node": 2, "global_batch_size": 4}
    assert plan(None, ModelSize(**shape), **two_gpus).warnings == (
        "A model of 7,000,000,000 parameters does not fit on 2 GPUs of 64 GB even with FSDP; "
        "try --gpus 8, or --activation-checkpointing, or a smaller micro-batch.",
    )
    # Recomputed, 3.3 GB of activations: 4 GPUs suffice; checkpointing is already on.
    recomputed = ModelSize(**shape, activation_checkpointing=True)
    assert plan(None, recomputed, **two_gpus).warnings == (
        "A model of 7,000,000,000 parameters does not fit on 2 GPUs of 64 GB even with FSDP; "
        "try --gpus 4, or a smaller micro-batch.",
    )


def test_more_gpus_are_not_suggested_when_what_every_gpu_keeps_does_not_fit() -> None:
    # 7 B in 32 layers of width 4096, 32,768 tokens, 2 samples per GPU: 34 bytes per token,
    # sample, width and layer are 292.1 GB of activations on every GPU, plus the two bf16
    # blocks FSDP gathers (2 × 7 B / 32 × 2 bytes = 0.875 GB): no number of GPUs holds that.
    shape = {"parameters": 7 * 10**9, "layers": 32, "width": 4096, "sequence_length": 32768}
    kept = (34 * 32768 * 2 * 4096 * 32 + 2 * 7 * 10**9 / 32 * 2) / GB
    two_gpus = {"nodes": 1, "gpus_per_node": 2, "global_batch_size": 4}
    assert plan(None, ModelSize(**shape), **two_gpus).warnings == (
        "A model of 7,000,000,000 parameters does not fit on 2 GPUs of 64 GB even with FSDP "
        f"({kept:.1f} GB per GPU stay whatever the number of GPUs); "
        "try --activation-checkpointing, or a smaller micro-batch.",
    )
    # Recomputed (2 bytes per layer kept, one layer's 34 rebuilt), one sample per GPU, 8 times
    # the tokens: (2 × 32 + 34) × 262,144 × 4096 bytes = 105 GB, still beyond a GCD, and
    # nothing the plan controls is left to change.
    longest = ModelSize(**{**shape, "sequence_length": 8 * 32768}, activation_checkpointing=True)
    warning = plan(None, longest, nodes=1, gpus_per_node=2, global_batch_size=2).warnings[0]
    assert "--gpus" not in warning and "more GPUs" not in warning
    assert warning.endswith("; try a shorter sequence or a narrower model.")


def test_more_gpus_are_named_up_to_the_largest_lumi_partition() -> None:
    # standard-g takes up to 1024 nodes, 8192 GCDs: 27.84 T parameters fit there (16 bytes
    # each / 8192 = 54.375 GB ≤ 0.85 × 64 GB), 27.87 T need more nodes than LUMI has.
    largest = plan(16, ModelSize(parameters=27_840 * 10**9))
    assert largest.warnings[0].endswith("even with FSDP; try --gpus 8192.")
    beyond = plan(16, ModelSize(parameters=27_870 * 10**9))
    assert beyond.warnings[0].endswith("even with FSDP; try more GPUs.")


def test_profiles_without_gpu_memory_say_so() -> None:
    local = plan(2, ModelSize(parameters=10**6), cluster="local")
    assert local.memory_estimates == () and "no estimate" in local.warnings[-1]


@pytest.mark.parametrize(
    ("text", "count"),
    [("124M", 124_000_000), ("1.3B", 1_300_000_000), ("7e9", 7 * 10**9), ("1", 1)],
)
def test_parameter_counts_with_suffixes(text: str, count: int) -> None:
    assert parse_count(text) == count


def test_a_parameter_count_that_is_not_one() -> None:
    with pytest.raises(ScaletrainError) as caught:
        parse_count("1.3X")
    assert caught.value.problem == "'1.3X' is not a number of parameters."
    assert caught.value.hint == "write it as 124M, 1.3B, 7e9 or 350000000."
