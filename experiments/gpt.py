"""A GPT-style decoder in plain PyTorch whose attention is chosen by name: the model of the
FlashAttention-2 paper's end-to-end table (Dao 2023, Table 1: GPT3-1.3B and GPT3-2.7B, context 2k
and 8k, trained without FlashAttention, with FlashAttention-1 and with FlashAttention-2).

The architecture is GPT-3's (Brown et al. 2020), as in flash-attn's training configs
(training/configs/experiment/pile/gpt3*-flash*.yaml):
  token embedding + learned positional embedding
  N pre-LayerNorm blocks: x + attn(ln1(x)), then x + mlp(ln2(x)), the MLP 4x wide with GELU (tanh)
  final LayerNorm, LM head tied to the token embedding (GPT-3's and flash-attn's default)
Linear layers carry biases, as GPT-3's do. No dropout: throughput runs and the loss comparisons want
a deterministic model.

Positions are learned, not rotary: it is GPT-3's scheme and that of flash-attn's gpt3*-flash
configs, and it keeps everything outside the attention call identical across providers (rotary
would add elementwise work on q and k that is not what the table compares).

Attention, by name (ATTENTIONS), always causal, on q, k, v (B, H, N, D) cut from one fused qkv
projection:
  ours        kernels.flash_attention (FlashAttention-2)
  ours_fa1    kernels.flash_attention(..., algorithm="fa1"): the engine's FlashAttention-1 arm
  sdpa_flash  torch SDPA pinned to its FlashAttention backend (sdpa_kernel), is_causal=True
  sdpa_cudnn  torch SDPA pinned to its cuDNN backend
  standard    kernels.reference.standard_attention: matmul, softmax, matmul with the N x N matrix
              in memory, the paper's "without FlashAttention"
The engine's kernels take fp16 and bf16 only. Under bf16 autocast (training on the GPU) q, k, v
already arrive in bf16; a float32 model without autocast (the CPU tests) casts them to fp16 for the
kernel and the output back to float32, since fp16 keeps three more mantissa bits than bf16 and the
activations here are far from fp16's range limit.

The forward has no data-dependent Python branching (only checks on dtypes and shapes, which
torch.compile specialises on), so `torch.compile(model, fullgraph=True)` traces it with `ours`.
This module knows nothing about timing or the pipeline (see experiments/training.py).
"""
from __future__ import annotations

import dataclasses
import functools
import math

import torch
import torch.nn.functional as F
from torch import nn

ATTENTIONS = ("ours", "ours_fa1", "sdpa_flash", "sdpa_cudnn", "standard")


@dataclasses.dataclass(frozen=True)
class GPTConfig:
    layers: int
    hidden: int
    heads: int
    vocab: int = 50257
    seqlen: int = 2048  # the longest context: rows of the positional embedding

    def __post_init__(self):
        if self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) must be a multiple of heads ({self.heads})")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


# The paper's two sizes with head dim 128, as flash-attn's gpt3xl-flash and gpt3-2.7B-flash-hdim128
# configs; GPT-3's own 2.7B has 32 heads of 80. `tiny` is for the CPU tests (Triton's interpreter).
PRESETS = {
    "gpt3_1_3b": GPTConfig(layers=24, hidden=2048, heads=16, vocab=50257, seqlen=2048),
    "gpt3_2_7b": GPTConfig(layers=32, hidden=2560, heads=20, vocab=50257, seqlen=2048),
    "tiny": GPTConfig(layers=2, hidden=64, heads=2, vocab=128, seqlen=64),
}


def preset(name: str, seqlen: int | None = None) -> GPTConfig:
    """A preset by name, with its context set to `seqlen` if given (e.g. 8192 for the 8k rows)."""
    if name not in PRESETS:
        raise ValueError(f"unknown model {name!r}; presets are {', '.join(PRESETS)}")
    config = PRESETS[name]
    return config if seqlen is None else dataclasses.replace(config, seqlen=seqlen)


# ------------------------------------------------------------------------------------------------
# attention by name: each is fn(q, k, v) -> o, all (B, H, N, D), causal
# ------------------------------------------------------------------------------------------------

def _flash(q, k, v, algorithm: str):
    from kernels import SUPPORTED_DTYPES, flash_attention

    dtype = q.dtype
    if dtype not in SUPPORTED_DTYPES:  # a float32 model without autocast: see the module docstring
        q, k, v = q.to(torch.float16), k.to(torch.float16), v.to(torch.float16)
    return flash_attention(q, k, v, causal=True, algorithm=algorithm).to(dtype)


def _sdpa(backend_name: str, q, k, v):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(getattr(SDPBackend, backend_name)):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def _standard(q, k, v):
    from kernels.reference import standard_attention

    return standard_attention(q, k, v, causal=True)


def attention_function(name: str):
    """The causal attention called `name` (one of ATTENTIONS), as fn(q, k, v) -> o."""
    functions = {
        "ours": functools.partial(_flash, algorithm="fa2"),
        "ours_fa1": functools.partial(_flash, algorithm="fa1"),
        "sdpa_flash": functools.partial(_sdpa, "FLASH_ATTENTION"),
        "sdpa_cudnn": functools.partial(_sdpa, "CUDNN_ATTENTION"),
        "standard": _standard,
    }
    if name not in functions:
        raise ValueError(f"unknown attention {name!r}; choose one of {', '.join(ATTENTIONS)}")
    return functions[name]


# ------------------------------------------------------------------------------------------------
# the model
# ------------------------------------------------------------------------------------------------

class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig, attention: str):
        super().__init__()
        self.heads = config.heads
        self.qkv = nn.Linear(config.hidden, 3 * config.hidden)
        self.out = nn.Linear(config.hidden, config.hidden)
        self.attend = attention_function(attention)

    def forward(self, x):  # x: (B, N, C)
        b, n, c = x.shape
        # (B, N, 3C) -> three (B, H, N, D) views of the one projection
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        o = self.attend(q, k, v)  # (B, H, N, D)
        return self.out(o.transpose(1, 2).reshape(b, n, c))


class MLP(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.fc1 = nn.Linear(config.hidden, 4 * config.hidden)
        self.fc2 = nn.Linear(4 * config.hidden, config.hidden)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, config: GPTConfig, attention: str):
        super().__init__()
        self.ln1 = nn.LayerNorm(config.hidden)
        self.attn = CausalSelfAttention(config, attention)
        self.ln2 = nn.LayerNorm(config.hidden)
        self.mlp = MLP(config)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """model(tokens) -> logits (B, N, vocab); model(tokens, targets) -> mean next-token cross-entropy."""

    def __init__(self, config: GPTConfig, attention: str = "ours"):
        super().__init__()
        self.config = config
        self.attention = attention
        self.token_embedding = nn.Embedding(config.vocab, config.hidden)
        self.position_embedding = nn.Embedding(config.seqlen, config.hidden)
        self.blocks = nn.ModuleList(Block(config, attention) for _ in range(config.layers))
        self.ln_f = nn.LayerNorm(config.hidden)
        self.lm_head = nn.Linear(config.hidden, config.vocab, bias=False)
        self.lm_head.weight = self.token_embedding.weight  # tied, as GPT-3
        self.apply(self._init)
        # GPT-2's scaling of the projections that write into the residual stream, by depth
        for name, parameter in self.named_parameters():
            if name.endswith(("attn.out.weight", "mlp.fc2.weight")):
                nn.init.normal_(parameter, std=0.02 / math.sqrt(2 * config.layers))

    @staticmethod
    def _init(module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, tokens, targets=None):  # tokens, targets: (B, N) int64
        n = tokens.shape[1]
        positions = torch.arange(n, device=tokens.device)
        x = self.token_embedding(tokens) + self.position_embedding(positions)
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))  # (B, N, vocab)
        if targets is None:
            return logits
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.reshape(-1))
