"""Will the model fit? Memory per GPU under each strategy, from the number of parameters.

Pure arithmetic, no torch: `scaletrain plan` runs on login nodes. Model states per parameter
with Adam follow the ZeRO paper (Rajbhandari et al. 2020, section 3.1: mixed precision keeps
16-bit parameters and gradients plus float32 master weights, momentum and variance, 4 + 12
bytes); what each strategy shards is its own (see `BYTES_PER_PARAMETER`). Activations of a
transformer layer follow Korthikanti et al. 2022 (section 4.1): 34·s·b·h bytes for 16-bit
activations, without the attention scores that FlashAttention (PyTorch's
scaled_dot_product_attention) does not keep; with activation checkpointing each layer keeps
only its 16-bit input, 2·s·b·h, plus one layer's activations while it is recomputed.
"""

from __future__ import annotations

from dataclasses import dataclass

from scaletrain.core.errors import ScaletrainError

_GB = 1e9
# Of a GPU's memory, what tensors can use: the CUDA/HIP context, the caching allocator's
# fragmentation and communication buffers take the rest (a rule of thumb, not a measurement).
USABLE_FRACTION = 0.85

# strategy -> precision -> (bytes per parameter kept whole on every GPU, bytes sharded):
# parameters + gradients + optimizer state (Adam: master weights, momentum, variance).
BYTES_PER_PARAMETER: dict[str, dict[str, tuple[float, float]]] = {
    # float32 parameters and gradients (autocast computes in bf16), DDP's gradient buckets
    # hold one more copy of the gradients, Adam's two moments.
    "ddp": {"fp32": (4 + 4 + 4 + 8, 0), "bf16": (4 + 4 + 4 + 8, 0)},
    # Everything sharded; the float32 shards are cast to bf16 when gathered.
    "fsdp": {"fp32": (0, 4 + 4 + 8), "bf16": (0, 4 + 4 + 8)},
    "hsdp": {"fp32": (0, 4 + 4 + 8), "bf16": (0, 4 + 4 + 8)},
    # DeepSpeed keeps a float32 master copy apart from the parameters also in fp32 training.
    "zero1": {"fp32": (4 + 4, 4 + 8), "bf16": (2 + 2, 4 + 4 + 4)},
    "zero2": {"fp32": (4, 4 + 4 + 8), "bf16": (2, 2 + 4 + 4 + 4)},
    "zero3": {"fp32": (0, 4 + 4 + 4 + 8), "bf16": (0, 2 + 2 + 4 + 4 + 4)},
}
# Activation bytes per token and unit of width in one layer (16-bit), and with recomputation.
_ACTIVATION_BYTES = 34
_CHECKPOINT_BYTES = 2


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelSize:
    """What the memory estimate needs to know about the model and its batch."""

    parameters: int
    precision: str = "bf16"
    """fp32 or bf16 (fp16 needs the same memory as bf16)."""
    layers: int | None = None
    width: int | None = None
    sequence_length: int | None = None
    """Transformer shape; without all three, activations are left out."""
    micro_batch: int = 1
    """Samples per GPU per forward pass."""
    activation_checkpointing: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryEstimate:
    """Memory per GPU under one strategy, in GB."""

    strategy: str
    model_states_gb: float
    """Parameters, gradients and optimizer state (this GPU's share)."""
    activations_gb: float | None
    """None when the model's shape was not given."""
    total_gb: float
    fits: bool
    """Within USABLE_FRACTION of the GPU's memory."""


def activation_bytes(size: ModelSize) -> float | None:
    """Activations one GPU keeps for the backward pass of one micro-batch."""
    if size.layers is None or size.width is None or size.sequence_length is None:
        return None
    per_layer = size.sequence_length * size.micro_batch * size.width
    scale = 2 if size.precision == "fp32" else 1  # 4-byte instead of 2-byte activations
    if size.activation_checkpointing:
        return scale * per_layer * (_CHECKPOINT_BYTES * size.layers + _ACTIVATION_BYTES)
    return scale * per_layer * _ACTIVATION_BYTES * size.layers


def shard_count(strategy: str, *, world_size: int, gpus_per_node: int) -> int:
    """Over how many GPUs a strategy shards: HSDP within a node, the others over all."""
    return min(gpus_per_node, world_size) if strategy == "hsdp" else world_size


def estimate_memory(
    size: ModelSize,
    strategy: str,
    *,
    world_size: int,
    gpus_per_node: int,
    gpu_memory_gb: float,
) -> MemoryEstimate:
    """Memory per GPU for `size` under `strategy` on `world_size` GPUs."""
    whole, sharded = BYTES_PER_PARAMETER[strategy]["fp32" if size.precision == "fp32" else "bf16"]
    shards = shard_count(strategy, world_size=world_size, gpus_per_node=gpus_per_node)
    states = size.parameters * (whole + sharded / shards)
    if whole == 0 and size.layers:
        # FSDP and ZeRO-3 gather a block's 16-bit parameters before it runs, the next one
        # prefetched: two blocks whole at a time.
        states += 2 * (size.parameters / size.layers) * (4 if size.precision == "fp32" else 2)
    activations = activation_bytes(size)
    total = states + (activations or 0.0)
    return MemoryEstimate(
        strategy=strategy,
        model_states_gb=states / _GB,
        activations_gb=None if activations is None else activations / _GB,
        total_gb=total / _GB,
        fits=total <= USABLE_FRACTION * gpu_memory_gb * _GB,
    )


def suggest_strategy(estimates: list[MemoryEstimate], *, nodes: int) -> str | None:
    """The strategy that fits with the least communication, among PyTorch's own: DDP if the
    whole model fits, then HSDP across nodes (only gradients cross the slower network), then
    FSDP. None when even FSDP does not fit."""
    fitting = {estimate.strategy for estimate in estimates if estimate.fits}
    order = ["ddp", "hsdp", "fsdp"] if nodes > 1 else ["ddp", "fsdp"]
    return next((strategy for strategy in order if strategy in fitting), None)


_SUFFIXES = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9, "G": 10**9, "T": 10**12}


def model_size(
    parameters: str | None,
    *,
    layers: int | None,
    width: int | None,
    sequence_length: int | None,
    activation_checkpointing: bool,
    precision: str | None,
) -> ModelSize | None:
    """The model a request names (`--model-params 1.3B`, its shape); None without one."""
    if parameters is None:
        if any(value is not None for value in (layers, width, sequence_length)):
            raise ScaletrainError(
                "--layers, --width and --seq-len describe the model of --model-params.",
                "add --model-params (e.g. 1.3B) for the memory estimate, or leave them out.",
            )
        return None
    return ModelSize(
        parameters=parse_count(parameters),
        precision="fp32" if precision == "fp32" else "bf16",  # fp16 takes what bf16 takes
        layers=layers,
        width=width,
        sequence_length=sequence_length,
        activation_checkpointing=activation_checkpointing,
    )


def parse_count(text: str) -> int:
    """`124M`, `1.3B`, `7e9` or `350000000` as a number of parameters."""
    cleaned = text.strip().upper()
    number, suffix = (cleaned[:-1], cleaned[-1]) if cleaned[-1:] in _SUFFIXES else (cleaned, "")
    try:
        value = float(number) * _SUFFIXES[suffix]
    except ValueError:
        value = -1.0
    if value < 1:
        raise ScaletrainError(
            f"{text!r} is not a number of parameters.",
            "write it as 124M, 1.3B, 7e9 or 350000000.",
        )
    return round(value)
