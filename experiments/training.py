"""End-to-end training of experiments/gpt.py: the FLOP count, a synthetic task, a training loop,
GPU timing of steady-state steps, and the loss-agreement run. Pure functions; no pipeline code.

FLOPs (model_flops_per_token): the FlashAttention-2 paper (Dao 2023, Section 4.2, Table 1) counts
training FLOPs "following Megatron-LM" as

    6 * seqlen * (number of params) + 12 * layers * hidden * seqlen^2        per sequence,

i.e. per token 6 * P + 12 * L * h * s. Megatron-LM's formula (Narayanan et al. 2021, Section 5.1)
makes precise which parameters: 96 B s L h^2 (1 + s / (6h) + V / (16 L h)) counts the transformer
blocks' matmuls (12 L h^2 weights: qkv 3h^2, output h^2, MLP 8h^2), the attention matmuls
(Q K^T and P V, not halved for the causal mask) and the logit layer (V h), with a factor 4 for
forward + backward + activation recomputation. flash-attn's training README uses it "scaled by 3/4
to get the model FLOPs" (no recomputation counted). So here

    P = 12 * L * h^2 + V * h                         (matmul weights, the tied LM head once)
    model_flops_per_token = 6 * P + 12 * L * h * s

Biases, LayerNorms and the positional table are left out (a lookup and elementwise work; together
under 0.5% of P at the paper's sizes). The attention term is the paper's: not halved for causal
masking, so it counts the full score matrix, as the paper's Table 1 does (our kernel benchmarks,
experiments/flops.py, halve it; the two are not to be mixed). Softmax and elementwise work are not
counted. (flash-attn's 3/4 scaling of Megatron's logit term gives 4.5 V h instead of 6 V h; we
keep 6, which is what three passes of the logit matmul cost and what 6 * params gives.)
At GPT3-1.3B, 2k context: P = 1.311e9 (the model has 1.316e9 parameters in all) and 9.07 GFLOP per
token; flash-attn's README reports 169k tokens/s on 8 A100s for it, which this count makes 192
TFLOP/s per GPU against the 189 it states (4.5 V h instead of 6 V h gives 188).

Timing (time_training) is for a CUDA GPU: bf16 autocast over float32 weights, AdamW, the whole
step (forward, loss, backward, optimizer step, zeroing the gradients) bracketed by CUDA events,
after warm-up steps that also absorb compilation. An out-of-memory anywhere gives a result with
status "oom" instead of an exception, and the memory is freed for the next configuration.
"""
from __future__ import annotations

import gc
import statistics
import time
from typing import Callable, Iterator

import torch

from experiments.gpt import GPT, GPTConfig

AUTO = "auto"  # train_steps' autocast default: bf16 on CUDA, none on the CPU
TASK_SEED = 1234  # fixes the synthetic task (the Markov chain), apart from the seed that draws data
SUCCESSORS = 4  # each token is followed by one of this many tokens
SUCCESSOR_PROBS = (0.55, 0.25, 0.15, 0.05)


def matmul_params(config: GPTConfig) -> int:
    """The weights that multiply every token: 12 L h^2 in the blocks plus the (tied) LM head V h."""
    return 12 * config.layers * config.hidden ** 2 + config.vocab * config.hidden


def model_flops_per_token(config: GPTConfig, seqlen: int) -> float:
    """Training FLOPs per token, forward and backward: 6 P + 12 L h s (see the module docstring)."""
    return 6.0 * matmul_params(config) + 12.0 * config.layers * config.hidden * seqlen


# ------------------------------------------------------------------------------------------------
# the synthetic task
# ------------------------------------------------------------------------------------------------

def _markov_chain(vocab: int, task_seed: int) -> torch.Tensor:
    """(vocab, SUCCESSORS) int64: the tokens that may follow each token, most likely first.

    Drawn independently (a row may repeat a token, which only lowers its entropy): one permutation
    per row would cost vocab^2 at GPT-3's 50257.
    """
    generator = torch.Generator().manual_seed(task_seed)
    return torch.randint(vocab, (vocab, SUCCESSORS), generator=generator)


def synthetic_batches(config: GPTConfig, batch: int, seqlen: int, seed: int, *, task_seed: int = TASK_SEED,
                      device: torch.device | str = "cpu") -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Endless (tokens, targets) batches, each (batch, seqlen) int64, targets = tokens shifted by one.

    The sequences come from a fixed random order-1 Markov chain over the vocabulary: each token is
    followed by one of SUCCESSORS tokens with probabilities SUCCESSOR_PROBS, so a model can learn
    the task down to the chain's entropy (at most 1.11 nats, against ln(vocab) for guessing). The
    chain depends on task_seed only; `seed` draws the sequences. Drawn on the CPU (the same tokens
    on every machine) and moved to `device`.
    """
    successors = _markov_chain(config.vocab, task_seed)
    probs = torch.tensor(SUCCESSOR_PROBS)
    generator = torch.Generator().manual_seed(seed)
    while True:
        sequence = torch.empty(batch, seqlen + 1, dtype=torch.int64)
        sequence[:, 0] = torch.randint(config.vocab, (batch,), generator=generator)
        choices = torch.multinomial(probs, batch * seqlen, replacement=True, generator=generator).view(batch, seqlen)
        for t in range(seqlen):
            sequence[:, t + 1] = successors[sequence[:, t], choices[:, t]]
        sequence = sequence.to(device)
        yield sequence[:, :-1], sequence[:, 1:]


# ------------------------------------------------------------------------------------------------
# training
# ------------------------------------------------------------------------------------------------

def adamw(lr: float = 1e-3, weight_decay: float = 0.1) -> Callable:
    """An optimizer factory: AdamW at a fixed learning rate (fused on CUDA)."""
    def make(parameters):
        parameters = list(parameters)
        fused = all(p.is_cuda for p in parameters)
        return torch.optim.AdamW(parameters, lr=lr, weight_decay=weight_decay, betas=(0.9, 0.95), fused=fused)
    return make


def _resolve_autocast(autocast_dtype, device: torch.device):
    if autocast_dtype == AUTO:
        return torch.bfloat16 if device.type == "cuda" else None
    return autocast_dtype


def _step(model, optimizer, tokens, targets, autocast_dtype, device: torch.device) -> torch.Tensor:
    """One training step; returns the loss as a (detached) tensor, so no host synchronisation."""
    with torch.autocast(device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
        loss = model(tokens, targets)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.detach()


def train_steps(model, batches, steps: int, optimizer_factory: Callable = adamw(), autocast_dtype=AUTO,
                device: torch.device | str | None = None) -> list[float]:
    """Train `model` for `steps` steps on `batches`; return each step's loss (before its update)."""
    device = torch.device(device) if device is not None else next(model.parameters()).device
    autocast_dtype = _resolve_autocast(autocast_dtype, device)
    optimizer = optimizer_factory(model.parameters())
    model.train()
    losses = []
    for _, (tokens, targets) in zip(range(steps), batches):
        losses.append(_step(model, optimizer, tokens.to(device), targets.to(device), autocast_dtype, device))
    return [float(loss) for loss in losses]


def build_model(config: GPTConfig, attention: str, seed: int, device: torch.device | str,
                init_on_device: bool = False) -> GPT:
    """The model with weights drawn from `seed`: on the CPU (so alike on every device), or with
    `init_on_device` by the device's own generator (seconds faster at GPT-3 sizes; for timing, where
    the values do not matter)."""
    torch.manual_seed(seed)
    if init_on_device:
        with torch.device(device):
            return GPT(config, attention)
    return GPT(config, attention).to(device)


# ------------------------------------------------------------------------------------------------
# GPU timing
# ------------------------------------------------------------------------------------------------

PREPARED_BATCHES = 4  # distinct batches drawn before timing and cycled through, so no drawing is timed


def time_training(config: GPTConfig, attention: str, batch: int, seqlen: int, steps: int, warmup: int,
                  device: torch.device | str = "cuda", compile: bool = False, seed: int = 0) -> dict:
    """Time `steps` steady-state training steps after `warmup` steps (CUDA only).

    Returns a dict: status ("ok" or "oom"), note, tokens_per_step, step_ms (median over the timed
    steps), step_ms_min, step_ms_max, tokens_per_s (from the median), tflops (model TFLOP/s per GPU
    by model_flops_per_token, from the median), flops_per_token, params (all parameters, the tied
    embedding once), peak_mem_bytes (the allocator's peak during building and training, net of what
    the process held before: weights, gradients, AdamW state and activations), losses (the timed
    steps' losses, read after timing), warmup_s (wall time of the warm-up steps: Triton's and, with
    compile, torch.compile's compilation fall there). With compile=True the model goes through
    torch.compile(fullgraph=True). The weights are initialised on the device.
    """
    device = torch.device(device)
    if device.type != "cuda":
        raise ValueError(f"time_training needs a CUDA device, got {device}")
    if seqlen > config.seqlen:
        raise ValueError(f"seqlen {seqlen} exceeds the model's context {config.seqlen}")
    flops_per_token = model_flops_per_token(config, seqlen)
    result = dict(status="ok", note="", tokens_per_step=batch * seqlen, flops_per_token=flops_per_token)
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    try:
        result |= _timed_run(config, attention, batch, seqlen, steps, warmup, device, compile, seed)
        result["peak_mem_bytes"] = torch.cuda.max_memory_allocated(device) - before
    except Exception as error:
        if not _out_of_memory(error):
            raise
        result |= dict(status="oom", note=f"{type(error).__name__}: {error}".splitlines()[0][:300],
                       peak_mem_bytes=torch.cuda.max_memory_allocated(device) - before)
    # Out of the except block the traceback (and the model, optimizer and activations its frames
    # hold) is released; collect it and hand the cached blocks back, so the next configuration
    # starts from what the caller held.
    gc.collect()
    torch.cuda.empty_cache()
    if result["status"] == "ok":
        seconds = result["step_ms"] * 1e-3
        result["tokens_per_s"] = batch * seqlen / seconds
        result["tflops"] = flops_per_token * batch * seqlen / seconds / 1e12
    return result


def _out_of_memory(error: BaseException) -> bool:
    """An OutOfMemoryError, or an error raised because of one (torch.compile wraps what it hits)."""
    for _ in range(8):  # a bounded walk down the chain of causes
        if error is None:
            return False
        if isinstance(error, torch.OutOfMemoryError):
            return True
        error = error.__cause__ or error.__context__
    return False


def _timed_run(config, attention, batch, seqlen, steps, warmup, device, compile, seed) -> dict:
    model = build_model(config, attention, seed, device, init_on_device=True)
    params = sum(p.numel() for p in model.parameters())
    if compile:
        # A fresh compilation per configuration: one process runs many models, and dynamo stops
        # compiling a function (falling back to eager) after its recompile limit.
        torch._dynamo.reset()
    runnable = torch.compile(model, fullgraph=True) if compile else model
    optimizer = adamw()(model.parameters())
    batches = synthetic_batches(config, batch, seqlen, seed, device=device)
    prepared = [next(batches) for _ in range(PREPARED_BATCHES)]
    started = time.perf_counter()
    for i in range(warmup):
        _step(runnable, optimizer, *prepared[i % len(prepared)], torch.bfloat16, device)
    torch.cuda.synchronize(device)
    warmup_s = time.perf_counter() - started
    events = [torch.cuda.Event(enable_timing=True) for _ in range(steps + 1)]
    losses = []
    events[0].record()
    for i in range(steps):
        losses.append(_step(runnable, optimizer, *prepared[i % len(prepared)], torch.bfloat16, device))
        events[i + 1].record()
    torch.cuda.synchronize(device)
    step_ms = [start.elapsed_time(end) for start, end in zip(events, events[1:])]
    return dict(step_ms=statistics.median(step_ms), step_ms_min=min(step_ms), step_ms_max=max(step_ms),
                params=params, losses=[float(loss) for loss in losses], warmup_s=warmup_s)


# ------------------------------------------------------------------------------------------------
# numerical sanity end to end
# ------------------------------------------------------------------------------------------------

def loss_agreement(config: GPTConfig, steps: int, seeds: tuple[int, int] = (0, 1),
                   device: torch.device | str = "cpu", batch: int = 8, seqlen: int | None = None,
                   optimizer_factory: Callable = adamw()) -> dict:
    """Train with `ours` and with the reference from seeds[0], and the reference from seeds[1].

    The reference is sdpa_flash on CUDA and standard attention on the CPU (SDPA's flash backend is
    a GPU kernel). A seed sets both the initial weights and the sequences drawn from the (fixed)
    synthetic task. Returns the reference's name ("reference"), the seeds, the three loss curves
    ("ours", "reference_curve", "reference_other_seed"), max_abs_diff (the largest step-wise
    |ours - reference| from the same seed) and seed_spread (the largest step-wise
    |reference - reference from the other seed|): ours agrees with the reference end to end when
    max_abs_diff is well inside seed_spread.
    """
    device = torch.device(device)
    seqlen = seqlen or config.seqlen
    reference = "sdpa_flash" if device.type == "cuda" else "standard"

    def curve(attention, seed):
        model = build_model(config, attention, seed, device)
        batches = synthetic_batches(config, batch, seqlen, seed, device=device)
        return train_steps(model, batches, steps, optimizer_factory, device=device)

    ours, ref, other = curve("ours", seeds[0]), curve(reference, seeds[0]), curve(reference, seeds[1])
    return dict(reference=reference, seeds=tuple(seeds), ours=ours, reference_curve=ref, reference_other_seed=other,
                max_abs_diff=max(abs(a - b) for a, b in zip(ours, ref)),
                seed_spread=max(abs(a - b) for a, b in zip(ref, other)))
