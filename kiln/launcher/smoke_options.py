"""The smoke job's options, parsed without torch so the launcher can reject bad ones fast."""

from __future__ import annotations

import argparse

from kiln.launcher.arguments import SubcommandParser, positive


def build_parser() -> argparse.ArgumentParser:
    """Return the smoke job's argument parser."""
    parser = SubcommandParser(
        subcommand="smoke", prog="kiln-launch smoke", description="Train a small GPT on synthetic data."
    )
    parser.add_argument("--steps", type=positive, default=50, help="optimizer steps in total (default 50)")
    parser.add_argument("--checkpoint-every", type=positive, default=10, help="save every K steps (default 10)")
    parser.add_argument("--keep", type=positive, default=3, help="complete checkpoints to keep (default 3)")
    parser.add_argument("--batch-size", type=positive, default=8, help="sequences per rank per step (default 8)")
    parser.add_argument("--seq-len", type=positive, default=64, help="tokens per sequence (default 64)")
    parser.add_argument("--d-model", type=positive, default=96, help="model width (default 96)")
    parser.add_argument("--layers", type=positive, default=2, help="transformer blocks (default 2)")
    parser.add_argument("--lr", type=float, default=3e-3, help="peak learning rate (default 3e-3)")
    parser.add_argument("--seed", type=int, default=0, help="model and data seed (default 0)")
    parser.add_argument(
        "--strategy", choices=("auto", "ddp", "fsdp"), default="auto", help="auto: FSDP on several GPUs, else DDP"
    )
    parser.add_argument("--kill-at-step", type=positive, help="SIGKILL one rank at this step, first attempt only")
    parser.add_argument("--kill-rank", type=int, default=None, help="rank to kill (default: the last)")
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse smoke arguments; bad ones raise UsageError."""
    return build_parser().parse_args(argv)
