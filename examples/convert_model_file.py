"""Convert a matchopt model file of the older format (a torch.save archive) to the current one.

matchopt reads model files without torch's unpickler, so files saved before model files became
safetensors are refused with a pointer here. Both formats hold the same two things, the JSON
header that describes the fitted object and its tensors; this script moves them from one to the
other. The old file is read with ``torch.load(weights_only=True)`` (tensors and plain data
only): run it under torch >= 2.10 (older weights-only loaders have published advisories,
CVE-2025-32434 and CVE-2026-24747), and only on files you trust.

    python examples/convert_model_file.py old-model.pt new-model.pt

matchopt checks the new file when it loads it, as it checks any model file.
"""

from __future__ import annotations

import argparse
import io
import re
from pathlib import Path

import torch
from safetensors.torch import save

from matchopt.io import atomic_write_bytes
from matchopt.state import HEADER_KEY

#: The first torch release whose weights-only loader has no published advisory.
SAFE_TORCH = (2, 10)


def convert(data: bytes) -> bytes:
    """The bytes of an older-format model file as the current format."""
    release = tuple(int(part) for part in re.findall(r"\d+", torch.__version__)[:2])
    if release < SAFE_TORCH:
        raise SystemExit(f"torch {torch.__version__}: use torch >= 2.10 to read the old file")
    content = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    header = content.get("header") if isinstance(content, dict) else None
    tensors = content.get("tensors") if isinstance(content, dict) else None
    if not isinstance(header, str) or not isinstance(tensors, dict):
        raise SystemExit("not a matchopt model file of the older format")
    tensors = {str(name): tensor.contiguous() for name, tensor in tensors.items()}
    return save(tensors, metadata={HEADER_KEY: header})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    args = parser.parse_args()
    if args.new.exists():
        raise SystemExit(f"{args.new} exists; name a new file")
    atomic_write_bytes(args.new, convert(args.old.read_bytes()))
    print(f"{args.old} -> {args.new}")


if __name__ == "__main__":
    main()
