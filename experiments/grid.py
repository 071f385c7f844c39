"""Expands each ablation's settings (experiments/settings.py) into the cells it measures.

A cell is one row of results: a provider, a variant, a mode, a dtype and a shape, in one repetition.
A timed ablation's grid is laid out `repetitions` times, one pass after the other, each pass opening
with the matmul ceiling (so every CSV carries the roof measured interleaved with its cells). Within a
pass the order keeps each provider's kernel specialisations together, so each is compiled once.
Nothing here touches a GPU: `python -m experiments.grid` prints how many cells each ablation has.
"""
import dataclasses
import itertools
import json

from experiments.schema import ABLATIONS as _NAMES, INTERPRETER_ABLATIONS, TIMED_ABLATIONS  # noqa: F401

# kernels.flash_attention switches of each ablation arm. The ablations of the FlashAttention-2 kernels
# (tiles, causal, recompute, fa1_vs_fa2 and hopper's portable arm) pin them with PORTABLE: on
# sm_90 flash_attention's default forward (at head dim 128) and backward (at the pairs of
# kernels.attention.HOPPER_BACKWARD_DEFAULTS) are the Hopper kernels (kernels/_hopper.py, _hopper_bwd.py).
# speed, seqlen, accuracy, jit and features measure the engine's defaults.
PORTABLE = (("hopper", False), ("hopper_backward", False))
PORTABLE_BACKWARD = (("hopper_backward", False),)
CAUSAL_VARIANTS = {
    "skip_tiles": (True, PORTABLE),
    "mask_all_tiles": (True, PORTABLE + (("skip_masked_tiles", False),)),
    "full": (False, PORTABLE),
}
RECOMPUTE_VARIANTS = {"recompute": PORTABLE + (("recompute", True),),
                      "store_scores": PORTABLE + (("recompute", False),)}
# The Hopper kernels, one technique at a time: the portable FlashAttention-2 forward; TMA loads by a
# warp-specialised producer and asynchronous wgmma (kernels/_hopper.py), the consumers serial; then the
# softmax of one key tile overlapped with P V of the previous one. These forward arms run the portable
# backward (forward+backward rows show what the forward buys a training step). Then the backward in
# one pass with dQ by TMA reduce-add (kernels/_hopper_bwd.py) after the Hopper forward: its backward
# and forward+backward rows against the portable backward's (the portable arm's bwd rows).
HOPPER_ARMS = {
    "portable": (PORTABLE, ("fwd", "bwd", "fwd_bwd")),
    "hopper_serial": ((("hopper", True), ("hopper_overlap", False)) + PORTABLE_BACKWARD, ("fwd", "fwd_bwd")),
    "hopper": ((("hopper", True),) + PORTABLE_BACKWARD, ("fwd", "fwd_bwd")),
    "hopper_bwd": ((("hopper", True), ("hopper_backward", True)), ("bwd", "fwd_bwd")),
}
# `fa1` is the faithful FlashAttention-1 (kernels/_fa1.py: Algorithm 1's loop order and the
# one-program-per-head backward), timed in every mode. The single FlashAttention-1-style changes
# inside the FlashAttention-2 forward (eager rescale, no sequence parallelism) change the forward
# only, so they run forward and forward+backward; the atomic-dQ arm (dQ by atomic adds in the dK/dV
# kernel, the paper's scheme, instead of its own kernel) changes the backward only.
FA1_VS_FA2_ARMS = {
    "fa2": (PORTABLE, ("fwd", "bwd", "fwd_bwd")),
    "fa1": (PORTABLE + (("algorithm", "fa1"),), ("fwd", "bwd", "fwd_bwd")),
    "fa1_rescale": (PORTABLE + (("deferred_rescale", False),), ("fwd", "fwd_bwd")),
    "fa1_no_seqpar": (PORTABLE + (("seq_parallel", False),), ("fwd", "fwd_bwd")),
    "fa1_both": (PORTABLE + (("deferred_rescale", False), ("seq_parallel", False)), ("fwd", "fwd_bwd")),
    "atomic_dq": (PORTABLE + (("atomic_dq", True),), ("bwd", "fwd_bwd")),
}


@dataclasses.dataclass(frozen=True)
class Cell:
    experiment: str
    provider: str
    mode: str
    dtype: str
    batch: int | None = None
    heads: int | None = None
    kv_heads: int | None = None
    seqlen_q: int | None = None
    seqlen_k: int | None = None
    head_dim: int | None = None
    causal: bool = False
    variant: str = "default"
    switches: tuple = ()          # (name, value) pairs passed to kernels.flash_attention
    fwd_tiles: tuple | None = None  # (block_m, block_n, num_warps, num_stages); None: the default
    bwd_tiles: tuple | None = None
    size: int | None = None       # ceiling: matmul size or copy bytes
    repetition: int | None = None  # which pass over the grid (timed ablations)

    @property
    def key(self) -> str:
        """Identifies the cell across runs (journal entries)."""
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @property
    def label(self) -> str:
        """A short description for progress lines."""
        parts = [self.provider, self.variant, self.mode, self.dtype]
        if self.repetition is not None:
            parts.insert(0, f"rep {self.repetition}")
        if self.head_dim is None:
            return " ".join(parts + [f"size {self.size}"])
        parts.append(f"B{self.batch} H{self.heads}/{self.kv_heads} N{self.seqlen_q}x{self.seqlen_k} d{self.head_dim}")
        parts.append("causal" if self.causal else "full")
        tiles = self.fwd_tiles or self.bwd_tiles
        return " ".join(parts + ([f"tiles {tiles}"] if tiles else []))


def paper_shape(settings: dict, seqlen: int, head_dim: int) -> dict:
    """The paper's shapes: batch x seqlen = tokens (batch at least 1), heads x head_dim = hidden, or, at a head
    dim that does not divide it (96, 192), as many whole heads as fit (21 x 96 = 2016, 10 x 192 = 1920 of 2048);
    the FLOP counts are those of the shape that ran."""
    heads = settings["hidden"] // head_dim
    return dict(batch=max(1, settings["tokens"] // seqlen), heads=heads, kv_heads=heads,
                seqlen_q=seqlen, seqlen_k=seqlen, head_dim=head_dim)


def speed(s: dict) -> list[Cell]:
    """The paper's benchmark: every provider on the paper's shapes (speed sets its own head dims and dtypes)."""
    cells = []
    for dtype, head_dim, is_causal, mode in itertools.product(s["dtypes"], s["head_dims"], s["causal"], s["modes"]):
        for n, provider in itertools.product(s["seqlens"], s["providers"]):
            if provider == "flex" and (n not in s["flex_seqlens"] or dtype not in s["flex_dtypes"]):
                continue
            cells.append(Cell("speed", provider, mode, dtype, causal=is_causal, **paper_shape(s, n, head_dim)))
    return cells


def tiles(s: dict) -> list[Cell]:
    cells = []
    for head_dim, mode in itertools.product(s["head_dims"], ("fwd", "bwd")):
        shape = paper_shape(s, s["seqlen"], head_dim)
        cells.append(Cell("tiles", "ours", mode, s["dtype"], causal=s["causal"], switches=PORTABLE, **shape))
        sweep = s[mode]
        for config in itertools.product(sweep["block_m"], sweep["block_n"], sweep["num_warps"], sweep["num_stages"]):
            tiles_of_mode = {"fwd_tiles" if mode == "fwd" else "bwd_tiles": config}
            cells.append(Cell("tiles", "ours", mode, s["dtype"], causal=s["causal"], variant="sweep",
                              switches=PORTABLE, **tiles_of_mode, **shape))
    return cells


def causal(s: dict) -> list[Cell]:
    return [
        Cell("causal", "ours", mode, s["dtype"], causal=is_causal, variant=variant, switches=switches,
             **paper_shape(s, n, head_dim))
        for head_dim, mode, n in itertools.product(s["head_dims"], s["modes"], s["seqlens"])
        for variant, (is_causal, switches) in CAUSAL_VARIANTS.items()
    ]


def seqlen(s: dict) -> list[Cell]:
    """Each named shape set (the rows' variant) over its lengths."""
    return [
        Cell("seqlen", provider, mode, s["dtype"], batch=shape["batch"], heads=shape["heads"], kv_heads=shape["heads"],
             seqlen_q=n, seqlen_k=n, head_dim=shape["head_dim"], causal=is_causal, variant=name)
        for name, shape in s["shape_sets"].items()
        for is_causal, mode, n, provider in itertools.product(s["causal"], s["modes"], shape["seqlens"], s["providers"])
    ]


def recompute(s: dict) -> list[Cell]:
    return [
        Cell("recompute", "ours", mode, s["dtype"], causal=is_causal, variant=variant, switches=switches,
             **paper_shape(s, n, head_dim))
        for head_dim, is_causal, mode, n in itertools.product(s["head_dims"], s["causal"], s["modes"], s["seqlens"])
        for variant, switches in RECOMPUTE_VARIANTS.items()
    ]


def hopper(s: dict) -> list[Cell]:
    """Each Hopper arm of ours and the peers (cuDNN) on the paper's shapes."""
    return [
        cell
        for head_dim, is_causal, mode, n in itertools.product(s["head_dims"], s["causal"], s["modes"], s["seqlens"])
        for cell in [Cell("hopper", "ours", mode, s["dtype"], causal=is_causal, variant=variant, switches=switches,
                          **paper_shape(s, n, head_dim))
                     for variant, (switches, modes) in HOPPER_ARMS.items() if mode in modes]
        + [Cell("hopper", provider, mode, s["dtype"], causal=is_causal, **paper_shape(s, n, head_dim))
           for provider in s["peers"]]
    ]


def fa1_vs_fa2(s: dict) -> list[Cell]:
    return [
        Cell("fa1_vs_fa2", "ours", mode, s["dtype"], causal=is_causal, variant=variant, switches=switches,
             **paper_shape(s, n, head_dim))
        for head_dim, is_causal, n in itertools.product(s["head_dims"], s["causal"], s["seqlens"])
        for variant, (switches, modes) in FA1_VS_FA2_ARMS.items()
        for mode in modes
    ]


def accuracy(s: dict) -> list[Cell]:
    """Forward and backward errors of every provider (one cell measures both)."""
    return [
        Cell("accuracy", provider, "fwd_bwd", dtype, causal=is_causal, **shape)
        for dtype, shape, is_causal, provider in itertools.product(s["dtypes"], s["shapes"], s["causal"], s["providers"])
    ]


def ceiling(s: dict) -> list[Cell]:
    matmuls = [Cell("ceiling", "torch_matmul", "matmul", dtype, size=s["matmul_size"]) for dtype in s["dtypes"]]
    return matmuls + [Cell("ceiling", "torch_copy", "copy", "fp16", size=s["copy_mib"] * 2**20)]


LARGEST_BATCH = "+largest_batch"  # variant suffix of the row that a training cell's oom adds


def training(s: dict) -> list[Cell]:
    """One cell per model, context and attention, eager; and compiled where s["compile"] names all three.

    The variant is the model preset (experiments/gpt.py), "+compile" for torch.compile; the shape
    columns hold the attention's: batch = tokens_per_step // context, the model's heads of its head dim.
    """
    from experiments.gpt import preset  # imports torch: only when the cells are built, not when planning

    compiled = s["compile"]
    cells = []
    for model, context, provider in itertools.product(s["models"], s["contexts"], s["providers"]):
        config = preset(model)
        for compile_ in (False, True):
            if compile_ and not (provider in compiled["providers"] and model in compiled["models"]
                                 and context in compiled["contexts"]):
                continue
            cells.append(Cell("training", provider, "train", "bf16", batch=max(1, s["tokens_per_step"] // context),
                              heads=config.heads, kv_heads=config.heads, seqlen_q=context, seqlen_k=context,
                              head_dim=config.head_dim, causal=True, variant=model + ("+compile" if compile_ else "")))
    return cells


def largest_batch_cell(cell: Cell) -> Cell | None:
    """The row a training cell adds when it runs out of memory: the largest batch that fits (found by the
    runner, written in the row's batch column; the cell keeps the batch asked for, so its key is stable)."""
    if cell.experiment != "training" or cell.variant.endswith(LARGEST_BATCH):
        return None
    return dataclasses.replace(cell, variant=cell.variant + LARGEST_BATCH)


def features(s: dict) -> list[Cell]:
    """The engine's training features against their peers (experiments/features.py builds the cells)."""
    from experiments import features as feature_cells

    return feature_cells.cells(s)


def decode(s: dict) -> list[Cell]:
    """Inference decoding over a KV cache (experiments/decode.py builds the cells)."""
    from experiments import decode as decode_cells

    return decode_cells.cells(s, Cell)


def fp8(s: dict) -> list[Cell]:
    """The fp8 forward against the fp16 forward, one timed pass (experiments/fp8.py builds the cells; its
    accuracy cells are added once, after the passes, by `cells`)."""
    from experiments import fp8 as fp8_cells

    return fp8_cells.cells(s, Cell)


# Each ablation's cell builder, by the names experiments/schema.py defines.
ABLATIONS = {
    "speed": speed, "tiles": tiles, "causal": causal, "seqlen": seqlen, "recompute": recompute,
    "fa1_vs_fa2": fa1_vs_fa2, "accuracy": accuracy, "ceiling": ceiling, "training": training,
    "features": features,
    "decode": decode,
    "fp8": fp8,
    "hopper": hopper,
}
# dtypes the matmul ceiling can be timed in (fp8's rows are fp16 against fp8_e4m3: its passes time fp16's)
MATMUL_DTYPES = ("fp16", "bf16")
assert tuple(ABLATIONS) == _NAMES, "experiments/schema.py and the builders here name the same ablations"


def cells(ablation: str, settings: dict, on_gpu: bool) -> list[Cell]:
    """The ablation's cells on this host, in the order they are measured.

    A timed ablation's grid is repeated `repetitions` times, pass after pass, each pass opening with
    the matmul ceiling in the dtypes the pass uses. Without a GPU, accuracy takes its interpreter shapes.
    fp8's accuracy cells come once, after its passes; without a GPU they are all it has (on its interpreter
    shapes: the timings need the GPU).
    """
    if not on_gpu and ablation == "accuracy":
        settings = {**settings, "shapes": settings["interpreter_shapes"]}
    if ablation == "fp8":
        from experiments import fp8 as fp8_cells

        once = fp8_cells.accuracy_cells(settings, Cell, on_gpu)
        if not on_gpu:
            return once
    one_pass = ABLATIONS[ablation](settings)
    if ablation not in TIMED_ABLATIONS:
        return one_pass
    if ablation == "decode":  # decoding is read against the copy bandwidth: each pass times it too
        one_pass = [Cell(ablation, "torch_copy", "copy", "fp16", size=settings["copy_mib"] * 2**20)] + one_pass
    if ablation != "ceiling":
        dtypes = sorted({cell.dtype for cell in one_pass} & set(MATMUL_DTYPES))
        one_pass = [Cell(ablation, "torch_matmul", "matmul", dtype, size=settings["ceiling_matmul_size"])
                    for dtype in dtypes] + one_pass
    passes = [dataclasses.replace(cell, repetition=repetition)
              for repetition in range(settings["repetitions"]) for cell in one_pass]
    return passes + (once if ablation == "fp8" else [])


if __name__ == "__main__":
    from experiments.settings import ablation_settings, load_default

    for name, settings in ablation_settings(load_default(), ABLATIONS).items():
        print(f"{name:12s} {len(cells(name, settings, on_gpu=True)):6d} cells")
