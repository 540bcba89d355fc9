"""A small GPT-style decoder for the smoke job, and its synthetic data."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True, kw_only=True)
class GPTConfig:
    """Shape of the smoke model; the defaults give about a quarter million parameters."""

    vocab_size: int = 256
    seq_len: int = 64
    d_model: int = 96
    n_heads: int = 4
    n_layers: int = 2


class Block(nn.Module):
    """One pre-norm transformer block: causal self-attention, then an MLP."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.n_heads = config.n_heads
        self.ln_attn = nn.LayerNorm(config.d_model)
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model)
        self.proj = nn.Linear(config.d_model, config.d_model)
        self.ln_mlp = nn.LayerNorm(config.d_model)
        self.mlp = nn.Sequential(
            nn.Linear(config.d_model, 4 * config.d_model), nn.GELU(), nn.Linear(4 * config.d_model, config.d_model)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(self.ln_attn(x)).split(width, dim=2)
        q, k, v = (t.view(batch, length, self.n_heads, width // self.n_heads).transpose(1, 2) for t in (q, k, v))
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, length, width))
        return x + self.mlp(self.ln_mlp(x))


class TinyGPT(nn.Module):
    """Token and position embeddings, a few blocks, logits through the tied embedding."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        if config.d_model % config.n_heads:
            raise ValueError(f"d_model {config.d_model} is not a multiple of n_heads {config.n_heads}")
        self.config = config
        self.tokens = nn.Embedding(config.vocab_size, config.d_model)
        self.positions = nn.Embedding(config.seq_len, config.d_model)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.ln_out = nn.LayerNorm(config.d_model)
        # GPT-2's small embedding init: with unit-variance embeddings the tied output
        # layer starts with huge logits and a loss far above log(vocab).
        nn.init.normal_(self.tokens.weight, std=0.02)
        nn.init.normal_(self.positions.weight, std=0.02)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.tokens(tokens) + self.positions(positions)
        for block in self.blocks:
            x = block(x)
        # Tying through a matmul, not a second module, keeps one parameter for FSDP to shard.
        return self.ln_out(x) @ self.tokens.weight.T


def data_seed(seed: int, step: int, rank: int) -> int:
    """Mix (SEED, STEP, RANK) into one generator seed."""
    digest = hashlib.blake2b(f"{seed}:{step}:{rank}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & (2**63 - 1)


def synthetic_batch(
    config: GPTConfig, *, seed: int, step: int, rank: int, batch_size: int, noise: float = 0.1
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (inputs, targets) as a pure function of (SEED, STEP, RANK), so a resumed run sees the same data.

    Each sequence follows a fixed random permutation of the vocabulary (next =
    perm[current]) except where NOISE replaces a token at random: learnable, so
    the loss falls, but not trivially.
    """
    permutation = torch.randperm(config.vocab_size, generator=torch.Generator().manual_seed(seed))
    generator = torch.Generator().manual_seed(data_seed(seed, step, rank))
    length = config.seq_len + 1
    random_tokens = torch.randint(config.vocab_size, (batch_size, length), generator=generator)
    noisy = torch.rand((batch_size, length), generator=generator) < noise
    tokens = torch.empty((batch_size, length), dtype=torch.long)
    tokens[:, 0] = random_tokens[:, 0]
    for position in range(1, length):
        following = permutation[tokens[:, position - 1]]
        tokens[:, position] = torch.where(noisy[:, position], random_tokens[:, position], following)
    return tokens[:, :-1], tokens[:, 1:]
