"""Train a GPT language model with any strategy: DDP, FSDP, HSDP or DeepSpeed ZeRO, with bf16
and activation checkpointing — from a toy on a laptop to ~1 B parameters on LUMI.

    scaletrain run --nproc 2 examples/gpt/train.py --data-dir .cache/gpt --create-small-data \\
        --strategy fsdp --precision bf16 --activation-checkpointing
    deepspeed --num_gpus 2 examples/gpt/train.py --data-dir .cache/gpt --create-small-data \\
        --deepspeed_config examples/gpt/ds_zero3.json

The scaletrain lines are init(), wrap() (the strategy), loader(), Checkpointer, Progress
(tokens/s, MFU), micro_batches()/backward()/step() and shutdown(); the rest is nanoGPT's
recipe: AdamW, warm-up then cosine learning rate, gradient clipping.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import torch
from data import TokenBlocks, read_meta
from model import GPT, SIZES, GPTConfig

import scaletrain as st
from scaletrain.train.strategies.options import PRECISIONS, STRATEGIES


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Train a GPT with scaletrain.")
    parser.add_argument("--data-dir", type=Path, default=Path("data/gpt"))
    parser.add_argument(
        "--create-small-data",
        action="store_true",
        help="tokenise the Python docs (real English) if there is no corpus",
    )
    parser.add_argument("--model", choices=SIZES, default="tiny")
    parser.add_argument("--block-size", type=int, default=64, help="tokens per sequence")
    parser.add_argument(
        "--batch-size", type=int, default=32, help="global batch in sequences, over all processes"
    )
    parser.add_argument("--accumulation-steps", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--warmup-steps", type=int, default=20)
    parser.add_argument("--max-grad-norm", type=float, default=1.0)
    parser.add_argument("--dropout", type=float, default=0.0)
    parser.add_argument("--strategy", choices=STRATEGIES, default="ddp")
    parser.add_argument("--precision", choices=PRECISIONS, default="fp32")
    parser.add_argument("--activation-checkpointing", action="store_true")
    parser.add_argument("--no-checkpoints", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--device",
        help="cpu to train on the CPU although the launcher lists GPUs (DeepSpeed's launcher "
        "sets CUDA_VISIBLE_DEVICES from --num_gpus even where there are none)",
    )
    # What the DeepSpeed launcher passes (CSC's examples: --deepspeed --deepspeed_config).
    parser.add_argument("--deepspeed", action="store_true", help="(DeepSpeed launcher)")
    parser.add_argument("--deepspeed_config", type=Path, help="a DeepSpeed JSON config")
    parser.add_argument("--local_rank", type=int, help="(set by the DeepSpeed launcher)")
    return parser.parse_args()


def learning_rate(step: int, total: int, args: argparse.Namespace) -> float:
    """Linear warm-up, then cosine decay to a tenth (nanoGPT's schedule)."""
    if step < args.warmup_steps:
        return args.lr * (step + 1) / args.warmup_steps
    progress = (step - args.warmup_steps) / max(1, total - args.warmup_steps)
    return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0))))


@torch.no_grad()
def validation_loss(
    model: torch.nn.Module, loader: torch.utils.data.DataLoader, device: torch.device
) -> float:
    """Mean loss over the whole validation split: each rank sums its share, then all ranks."""
    model.eval()
    total = count = 0.0
    for inputs, targets in loader:
        loss = model(inputs.to(device, non_blocking=True), targets.to(device, non_blocking=True))
        total += float(loss) * len(inputs)
        count += len(inputs)
    model.train()
    return st.total(total) / st.total(count)


def main() -> None:
    args = parse_args()
    env = st.init(device=args.device)
    st.seed_everything(args.seed)  # the same initial weights on every rank
    with st.rank_zero_first():
        if args.create_small_data and not (args.data_dir / "meta.json").exists():
            from prepare_text import python_docs_text, write_corpus

            write_corpus(python_docs_text(), args.data_dir)
    meta = read_meta(args.data_dir)
    train_set = TokenBlocks(args.data_dir / "train.bin", args.block_size)
    val_set = TokenBlocks(args.data_dir / "val.bin", args.block_size)

    layers, heads, width = SIZES[args.model]
    config = GPTConfig(
        vocab_size=int(meta["vocab_size"]),  # type: ignore[call-overload]
        block_size=args.block_size,
        layers=layers,
        heads=heads,
        width=width,
        dropout=args.dropout,
    )
    model = GPT(config)
    parameters = model.num_parameters()
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1
    )
    strategy = "deepspeed" if args.deepspeed_config and args.strategy == "ddp" else args.strategy
    training = st.wrap(
        model,
        optimizer,
        strategy=strategy,
        precision=args.precision,
        activation_checkpointing=args.activation_checkpointing,  # per transformer block
        accumulation_steps=args.accumulation_steps,
        max_grad_norm=args.max_grad_norm,
        deepspeed_config=args.deepspeed_config,
    )
    # e.g. 32 sequences over 2 processes = 16 per process per step, in micro-batches of
    # 16 / accumulation steps; 32 × 64 tokens = 2,048 tokens per optimizer step
    train_loader = st.loader(train_set, global_batch_size=args.batch_size, seed=args.seed)
    val_loader = st.eval_loader(val_set, global_batch_size=args.batch_size)
    tokens_per_step = args.batch_size * args.block_size
    flops_per_token = st.transformer_flops_per_token(
        parameters=parameters, layers=layers, width=width, sequence_length=args.block_size
    )
    st.print0(
        f"GPT {args.model}: {parameters:,} parameters, strategy {strategy}, {args.precision}; "
        f"{len(train_set):,} training sequences of {args.block_size} tokens, "
        f"{len(train_loader)} steps per epoch of {tokens_per_step:,} tokens"
    )

    ckpt = st.Checkpointer(
        model=training.model,
        optimizer=training.optimizer,
        scaler=training.scaler,
        enabled=not args.no_checkpoints,
    )
    total_steps = args.epochs * len(train_loader)
    progress = st.Progress(
        total_steps,
        samples_per_step=args.batch_size,
        tokens_per_step=tokens_per_step,
        flops_per_step=flops_per_token * tokens_per_step,
        start_step=ckpt.step,
    )
    for epoch in ckpt.epochs(args.epochs):
        for inputs, targets in ckpt.batches(train_loader):
            for group in training.optimizer.param_groups:
                group["lr"] = learning_rate(ckpt.step - 1, total_steps, args)
            step_loss = torch.zeros((), device=env.device)
            for micro_inputs, micro_targets in training.micro_batches(
                inputs.to(env.device, non_blocking=True), targets.to(env.device, non_blocking=True)
            ):
                loss = training.model(micro_inputs, micro_targets)
                training.backward(loss)  # gradients synchronised on the last micro-batch only
                step_loss += loss.detach() / training.accumulation_steps
            training.step()  # clip over all shards, optimizer step, zero the gradients
            progress.update(epoch=epoch, loss=step_loss)
        val_loss = validation_loss(training.model, val_loader, env.device)
        st.print0(f"epoch {epoch}: validation loss {val_loss:.3f}")

    progress.finish(val_loss=validation_loss(training.model, val_loader, env.device))
    st.shutdown()


if __name__ == "__main__":
    main()
