"""Train the tiny LM under one strategy with the Checkpointer, e.g. `--epochs 1` (saves at the
end), then `--epochs 2` at another number of processes (resumes, trains the second epoch).

Rank 0 appends each step's loss (the mean over ranks) to <run dir>/losses.jsonl.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from tiny_lm import TinyLM, sequences
from torch.utils.data import TensorDataset

import scaletrain as st

SAMPLES, GLOBAL_BATCH = 48, 12  # 4 steps per epoch; 12 splits over 1, 2, 3 and 4 ranks


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--epochs", type=int, required=True)
    parser.add_argument(
        "--options",
        default="{}",
        help='JSON options of st.wrap; under "checkpointer", options of st.Checkpointer',
    )
    args = parser.parse_args()
    env = st.init()
    args.run_dir.mkdir(parents=True, exist_ok=True)
    st.seed_everything(0)
    model = TinyLM()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    options = json.loads(args.options)
    saving = options.pop("checkpointer", {})
    training = st.wrap(model, optimizer, **options)
    loader = st.loader(TensorDataset(sequences(SAMPLES, seed=7)), global_batch_size=GLOBAL_BATCH)
    ckpt = st.Checkpointer(
        model=training.model,
        optimizer=training.optimizer,
        run_dir=args.run_dir,
        every_minutes=None,
        **saving,
    )
    for _epoch in ckpt.epochs(args.epochs):
        for (batch,) in ckpt.batches(loader):
            batch = batch.to(env.device)
            loss = training.model(batch[:, :-1], batch[:, 1:])
            training.backward(loss)
            training.step()
            mean_loss = st.mean(loss)
            if env.is_main:
                with (args.run_dir / "losses.jsonl").open("a") as file:
                    file.write(json.dumps({"step": ckpt.step, "loss": mean_loss}) + "\n")
    st.shutdown()


if __name__ == "__main__":
    main()
