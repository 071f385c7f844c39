"""The `features` ablation: the engine's training features against the peers that offer the same one.

Arms (the rows' `variant` names the feature and its parameter; `provider` who runs it):
  plain            ours without a feature (the baseline of each feature's overhead; causal for the window);
                   ours runs the engine's defaults in every arm: on sm_90 the Hopper kernels where they cover
                   the call and their feature lists name its features (kernels.attention.HOPPER_FORWARD_FEATURES,
                   HOPPER_BACKWARD_FEATURES), the portable ones otherwise; `engine_features` names them
  window<w>        sliding window of w keys, causal: window_size = (w - 1, 0); ours, and flex with a
                   block mask of causal & q - kv < w (create_block_mask, so FlexAttention skips blocks)
  softcap<c>       tanh soft-capping of the scaled scores, c * tanh(s / c); ours, and flex's score_mod
  alibi            ALiBi, bias -slope_h * |i - j| with the paper's slopes 2^(-8 h / H); ours, flex score_mod
  dropout<p>       dropout p; ours (Philox), and sdpa_flash (PyTorch's CUDA FlashAttention-2) with dropout_p
  dropout_atomic_dq<p>  ours with dropout p and atomic_dq=True (forward+backward only): dQ accumulated in
                   the dK/dV kernel, so the backward regenerates the dropout mask once instead of twice
  varlen           a batch of sequences of mixed lengths packed into one run of tokens: ours through
                   flash_attn_varlen_func, flex on the packed tokens with a document mask (& causal)
  padded           the same sequences as a dense batch padded to the longest: ours' flash_attention on
                   (B, H, longest, D); it computes the pad too, which is what varlen saves

Dense shapes are the paper's (batch x seqlen = `tokens`, heads x head dim = `hidden`). A variable-length
cell records batch = the number of sequences and seqlen = the longest; the lengths (a seeded log-uniform
draw, `varlen_lengths`) are in the cell's switches and the row's note. TFLOP/s count the visible score
entries (experiments/flops.py: `visible_pairs`), the real sequences' for varlen, padded and flex alike.

Nothing here imports torch or the kernels at module level: the grid is built when Snakemake plans, and the
features themselves are called only when a cell runs (`attention`, `inputs`).
"""
from __future__ import annotations

import functools
import math
import random
import zlib

from experiments import flops
from experiments.grid import Cell

EXPERIMENT = "features"
FEATURES = ("window", "softcap", "alibi", "dropout", "varlen")


def window_variant(window: int) -> str:
    return f"window{window}"


def softcap_variant(softcap: float) -> str:
    return f"softcap{softcap:g}"


def dropout_variant(p: float) -> str:
    return f"dropout{p:g}"


def feature_of(variant: str) -> str:
    """"window1024" -> "window", "dropout0.1" -> "dropout": the family a variant belongs to."""
    return variant.rstrip("0123456789.")


def alibi_slopes(heads: int) -> list[float]:
    """ALiBi's head slopes (Press et al. 2022): 2^(-8 h / H) for h = 1 .. H."""
    return [2.0 ** (-8.0 * h / heads) for h in range(1, heads + 1)]


def varlen_lengths(sequences: int, min_len: int, max_len: int, seed: int) -> tuple[int, ...]:
    """A fixed draw of `sequences` lengths, log-uniform in [min_len, max_len] (seeded; no torch)."""
    draw = random.Random(seed)
    low, high = math.log(min_len), math.log(max_len)
    return tuple(min(max_len, max(min_len, round(math.exp(draw.uniform(low, high))))) for _ in range(sequences))


def _dense_shape(s: dict, seqlen: int) -> dict:
    heads = s["hidden"] // s["head_dim"]
    return dict(batch=max(1, s["tokens"] // seqlen), heads=heads, kv_heads=heads, seqlen_q=seqlen, seqlen_k=seqlen,
                head_dim=s["head_dim"])


def cells(s: dict) -> list[Cell]:
    """One pass of the ablation: each included feature's arms at each shape and mode (an arm that two
    features share, ours plain, is measured once)."""
    include, dtype, modes = s["include"], s["dtype"], s["modes"]
    flex = s["flex"]
    found = []

    def add(provider, mode, causal, variant, switches=(), **shape):
        if provider == "flex" and not flex:
            return
        found.append(Cell(EXPERIMENT, provider, mode, dtype, causal=causal, variant=variant, switches=switches,
                          **shape))

    for seqlen, mode in ((n, m) for n in s["seqlens"] for m in modes):
        shape = _dense_shape(s, seqlen)
        if "window" in include:
            window = (("window_size", (s["window"] - 1, 0)),)
            add("ours", mode, True, window_variant(s["window"]), window, **shape)
            add("flex", mode, True, window_variant(s["window"]), window, **shape)
            add("ours", mode, True, "plain", **shape)
        for causal in s["causal"]:
            if "softcap" in include or "alibi" in include or "dropout" in include:
                add("ours", mode, causal, "plain", **shape)
            if "softcap" in include:
                softcap = (("softcap", float(s["softcap"])),)
                add("ours", mode, causal, softcap_variant(s["softcap"]), softcap, **shape)
                add("flex", mode, causal, softcap_variant(s["softcap"]), softcap, **shape)
            if "alibi" in include:
                add("ours", mode, causal, "alibi", (("alibi", True),), **shape)
                add("flex", mode, causal, "alibi", (("alibi", True),), **shape)
            if "dropout" in include:
                dropout = (("dropout_p", float(s["dropout_p"])),)
                add("ours", mode, causal, dropout_variant(s["dropout_p"]), dropout, **shape)
                add("sdpa_flash", mode, causal, dropout_variant(s["dropout_p"]), dropout, **shape)
                if mode == "fwd_bwd":
                    add("ours", mode, causal, f"dropout_atomic_dq{s['dropout_p']:g}", dropout + (("atomic_dq", True),),
                        **shape)
    if "varlen" in include:
        v = s["varlen"]
        lengths = varlen_lengths(v["sequences"], v["min_len"], v["max_len"], v["seed"])
        shape = dict(batch=len(lengths), heads=v["heads"], kv_heads=v["heads"], seqlen_q=max(lengths),
                     seqlen_k=max(lengths), head_dim=v["head_dim"])
        for causal, mode in ((c, m) for c in v["causal"] for m in modes):
            switches = (("lengths", lengths),)
            add("ours", mode, causal, "varlen", switches, **shape)
            add("ours", mode, causal, "padded", switches, **shape)
            add("flex", mode, causal, "varlen", switches, **shape)
    return list(dict.fromkeys(found))


def _options(cell) -> dict:
    return dict(cell.switches)


def engine_kwargs(cell, alibi_slopes=None) -> dict:
    """flash_attention's keyword arguments for the training features of a dense `ours` cell (window_size,
    softcap, alibi_slopes, dropout_p, and atomic_dq, a switch of the portable backward); alibi_slopes is the
    caller's tensor (`_slopes`), or None where only the names matter."""
    options = _options(cell)
    kwargs = {}
    if "window_size" in options:
        kwargs["window_size"] = tuple(options["window_size"])
    if "softcap" in options:
        kwargs["softcap"] = options["softcap"]
    if options.get("alibi"):
        kwargs["alibi_slopes"] = alibi_slopes
    if "dropout_p" in options:
        kwargs["dropout_p"] = options["dropout_p"]
    if options.get("atomic_dq"):
        kwargs["atomic_dq"] = True
    return kwargs


def engine_features(cell) -> tuple[str, ...] | None:
    """The names of `engine_kwargs` for an `ours` cell, or None for the packed (varlen) arm, which no
    Hopper kernel takes."""
    return None if cell.variant == "varlen" else tuple(engine_kwargs(cell))


def lengths_of(cell) -> tuple[int, ...] | None:
    lengths = _options(cell).get("lengths")
    return tuple(lengths) if lengths is not None else None


def cell_flops(cell) -> float:
    """The cell's FLOPs by the visible score entries (experiments/flops.py): the real sequences' for the
    variable-length arms (varlen, padded, flex), the window's for a sliding window."""
    lengths = lengths_of(cell)
    if lengths is not None:
        pairs = sum(_pairs(n, n, cell.causal, (-1, -1)) for n in lengths)
    else:
        window = tuple(_options(cell).get("window_size", (-1, -1)))
        pairs = cell.batch * _pairs(cell.seqlen_q, cell.seqlen_k, cell.causal, window)
    return flops.pairs_flops(cell.heads, pairs, cell.head_dim, cell.mode)


@functools.cache
def _pairs(seqlen_q, seqlen_k, causal, window) -> int:
    return flops.visible_pairs(seqlen_q, seqlen_k, bool(causal), window)


def note(cell) -> str:
    """What a row's note records about its cell: the lengths of a variable-length batch."""
    lengths = lengths_of(cell)
    if lengths is None:
        return ""
    return f"{len(lengths)} sequences, {sum(lengths)} tokens, lengths {min(lengths)}-{max(lengths)}"


# ---------------------------------------------------------------- running a cell (torch from here on)

def inputs(cell, device):
    """q, k, v (requiring grad) and an output gradient in the layout the cell's arm takes: (B, H, N, D) for
    dense cells and the padded arm, packed (tokens, H, D) for ours' varlen, (1, H, tokens, D) for flex's."""
    import torch

    from experiments.providers import DTYPES, inputs as dense_inputs

    lengths = lengths_of(cell)
    if lengths is None or cell.variant == "padded":
        return dense_inputs(cell, device)
    total = sum(lengths)
    shape = (total, cell.heads, cell.head_dim) if cell.provider == "ours" else (1, cell.heads, total, cell.head_dim)
    generator = torch.Generator(device=device).manual_seed(zlib.crc32(repr((lengths, cell.heads, cell.head_dim,
                                                                           cell.dtype)).encode()))

    def randn():
        return torch.randn(*shape, generator=generator, device=device, dtype=DTYPES[cell.dtype], requires_grad=True)

    q, k, v = randn(), randn(), randn()
    return q, k, v, randn().detach()


def attention(cell, device):
    """fn(q, k, v) -> o for the cell's provider and arm (inputs as `inputs` makes them)."""
    return {"ours": _ours, "flex": _flex, "sdpa_flash": _sdpa_flash}[cell.provider](cell, device)


def _slopes(cell, device):
    import torch

    return torch.tensor(alibi_slopes(cell.heads), dtype=torch.float32, device=device)


def _ours(cell, device):
    import torch

    from kernels import flash_attention, flash_attn_varlen_func

    options = _options(cell)
    lengths = lengths_of(cell)
    if cell.variant == "varlen":
        offsets = [0]
        for n in lengths:
            offsets.append(offsets[-1] + n)
        cu_seqlens = torch.tensor(offsets, dtype=torch.int32, device=device)
        longest = max(lengths)

        def run_varlen(q, k, v):
            return flash_attn_varlen_func(q, k, v, cu_seqlens, cu_seqlens, longest, longest, causal=cell.causal)

        return run_varlen
    kwargs = engine_kwargs(cell, _slopes(cell, device) if options.get("alibi") else None)

    def run(q, k, v):  # the engine's defaults, as a model calls it: plain and padded are the baselines
        return flash_attention(q, k, v, causal=cell.causal, **kwargs)

    return run


def _sdpa_flash(cell, device):
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    dropout_p = _options(cell).get("dropout_p", 0.0)

    def run(q, k, v):
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=cell.causal)

    return run


def flex_mods(cell, device):
    """The (score_mod, mask_mod, length) of FlexAttention's version of the cell: mask_mod None for a full
    dense cell; `length` is the sequence length the block mask spans (the packed tokens for varlen)."""
    import torch

    options = _options(cell)
    lengths = lengths_of(cell)
    score_mod = mask_mod = None
    if lengths is not None:
        document = torch.repeat_interleave(torch.arange(len(lengths), device=device),
                                           torch.tensor(lengths, device=device))

        if cell.causal:
            def mask_mod(b, h, q_idx, kv_idx):
                return (document[q_idx] == document[kv_idx]) & (q_idx >= kv_idx)
        else:
            def mask_mod(b, h, q_idx, kv_idx):
                return document[q_idx] == document[kv_idx]

        return None, mask_mod, sum(lengths)
    if "window_size" in options:
        window = options["window_size"][0] + 1

        def mask_mod(b, h, q_idx, kv_idx):
            return (q_idx >= kv_idx) & (q_idx - kv_idx < window)
    elif cell.causal:
        def mask_mod(b, h, q_idx, kv_idx):
            return q_idx >= kv_idx
    if "softcap" in options:
        cap = options["softcap"]

        def score_mod(score, b, h, q_idx, kv_idx):
            return cap * torch.tanh(score / cap)
    elif options.get("alibi"):
        slopes = _slopes(cell, device)

        def score_mod(score, b, h, q_idx, kv_idx):
            return score - slopes[h] * (q_idx - kv_idx).abs()
    return score_mod, mask_mod, cell.seqlen_q


def _flex(cell, device):
    from torch.nn.attention.flex_attention import create_block_mask

    from experiments.providers import Unsupported, _compiled_flex

    if "dropout_p" in _options(cell):
        raise Unsupported("FlexAttention has no dropout")
    score_mod, mask_mod, length = flex_mods(cell, device)
    # Built once per cell, outside the timed calls. A packed (varlen) mask spans every token of the batch,
    # so it is built compiled and never materialised; a dense one is built eagerly (a length^2 bool tensor,
    # 256 MiB at 16k): compiling it took over 100 s at 16k and 31 s at 4k on the H200, against 5 s eagerly
    # (notes/flex_mask_probe_h200.txt), and held the features precompile at about four minutes.
    block_mask = (create_block_mask(mask_mod, None, None, length, length, device=device,
                                    _compile=lengths_of(cell) is not None)
                  if mask_mod is not None else None)
    flex = _compiled_flex()

    def run(q, k, v):
        return flex(q, k, v, score_mod=score_mod, block_mask=block_mask)

    return run
