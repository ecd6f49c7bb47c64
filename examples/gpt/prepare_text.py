"""Tokenise text into train.bin / val.bin (uint16 token ids) and meta.json, nanoGPT's layout.

Tokens are bytes (vocabulary 256): no vocabulary file to download, any language and code.
(For GPT-2's BPE, tokenise with tiktoken into the same files and set vocab_size 50257.)

    python examples/gpt/prepare_text.py --out data/mytext my_corpus/*.txt
    python examples/gpt/prepare_text.py --out .cache/gpt --python-docs   # the stand-in

The stand-in is real English: the first 100,000 characters of the Python reference manual's
topics, which ship with Python (pydoc_data; 465,000 characters in all).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

VAL_FRACTION = 0.1
STAND_IN_CHARACTERS = 100_000  # ~1,400 sequences of 64 tokens: two epochs in seconds on a CPU


def write_corpus(text: str, out: Path) -> dict[str, int]:
    """Write the byte tokens of `text` split 90/10 into train.bin and val.bin."""
    tokens = np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.uint16)
    split = int(len(tokens) * (1 - VAL_FRACTION))
    out.mkdir(parents=True, exist_ok=True)
    tokens[:split].tofile(out / "train.bin")
    tokens[split:].tofile(out / "val.bin")
    meta = {"vocab_size": 256, "tokenizer": "utf-8 bytes", "train_tokens": split,
            "val_tokens": len(tokens) - split}  # fmt: skip
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return meta


def python_docs_text(characters: int = STAND_IN_CHARACTERS) -> str:
    """The start of the Python reference manual's topics (real English prose and examples)."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[name] for name in sorted(topics))[:characters]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--python-docs", action="store_true", help="the small real stand-in")
    parser.add_argument("files", nargs="*", type=Path)
    args = parser.parse_args()
    text = python_docs_text() if args.python_docs else ""
    text += "\n\n".join(path.read_text(encoding="utf-8") for path in args.files)
    meta = write_corpus(text, args.out)
    train, val = meta["train_tokens"], meta["val_tokens"]
    print(f"{args.out}: {train:,} training and {val:,} validation tokens")


if __name__ == "__main__":
    main()
