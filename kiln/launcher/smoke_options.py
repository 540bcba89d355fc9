"""The smoke job's options, parsed without torch so the launcher can reject bad ones fast."""

from __future__ import annotations

import argparse

from kiln.launcher.errors import UsageError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:
        raise UsageError(f"smoke: {message}")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer (got {text!r})") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer (got {text!r})")
    return value


def build_parser() -> argparse.ArgumentParser:
    """Return the smoke job's argument parser."""
    parser = _Parser(prog="kiln-launch smoke", description="Train a small GPT on synthetic data.")
    parser.add_argument("--steps", type=_positive, default=50, help="optimizer steps in total (default 50)")
    parser.add_argument("--checkpoint-every", type=_positive, default=10, help="save every K steps (default 10)")
    parser.add_argument("--keep", type=_positive, default=3, help="complete checkpoints to keep (default 3)")
    parser.add_argument("--batch-size", type=_positive, default=8, help="sequences per rank per step (default 8)")
    parser.add_argument("--seq-len", type=_positive, default=64, help="tokens per sequence (default 64)")
    parser.add_argument("--d-model", type=_positive, default=96, help="model width (default 96)")
    parser.add_argument("--layers", type=_positive, default=2, help="transformer blocks (default 2)")
    parser.add_argument("--lr", type=float, default=3e-3, help="peak learning rate (default 3e-3)")
    parser.add_argument("--seed", type=int, default=0, help="model and data seed (default 0)")
    parser.add_argument(
        "--strategy", choices=("auto", "ddp", "fsdp"), default="auto", help="auto: FSDP on several GPUs, else DDP"
    )
    parser.add_argument("--kill-at-step", type=_positive, help="SIGKILL one rank at this step, first attempt only")
    parser.add_argument("--kill-rank", type=int, default=None, help="rank to kill (default: the last)")
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse smoke arguments; bad ones raise UsageError."""
    return build_parser().parse_args(argv)
