"""The GPT model and training helpers (experiments/gpt.py, experiments/training.py) on a tiny model.

Without a GPU the engine's kernels run through Triton's interpreter on the CPU, so the model is
tiny (2 layers, hidden 64, 2 heads of 32, vocabulary 128, 32 tokens) and float32; the `ours`
attention casts q, k, v to fp16 for the kernels (they take fp16/bf16 only) and the output back.
Tolerances follow tests/test_kernels.py: ours may be off the float32 baseline by at most twice
what PyTorch's own standard attention is off it when given fp16 q, k, v and computing in fp16
(the error that the cast alone brings), plus a small absolute floor.
"""
from __future__ import annotations

import pytest
import torch

from experiments import training
from experiments.gpt import ATTENTIONS, GPT, GPTConfig, attention_function
from kernels.reference import standard_attention

HAS_CUDA = torch.cuda.is_available()
DEVICE = "cuda" if HAS_CUDA else "cpu"
TINY = GPTConfig(layers=2, hidden=64, heads=2, vocab=128, seqlen=32)
BATCH, STEPS, LR = 4, 20, 3e-3
ABS_FLOOR = 1e-5


def _fp16_standard(q, k, v):
    """PyTorch's standard attention in fp16: the same-precision baseline for ours' fp16 cast."""
    return standard_attention(q.half(), k.half(), v.half(), causal=True).to(q.dtype)


def _model(attention: str, swap=None) -> GPT:
    model = training.build_model(TINY, attention, seed=0, device=DEVICE)
    if swap is not None:
        for block in model.blocks:
            block.attn.attend = swap
    return model


def _curve(attention: str, swap=None) -> list[float]:
    batches = training.synthetic_batches(TINY, BATCH, TINY.seqlen, seed=0, device=DEVICE)
    # fp32 on both devices (no autocast), so the fp16 baseline is what the tolerance is made of
    return training.train_steps(_model(attention, swap), batches, STEPS, training.adamw(LR), autocast_dtype=None)


def _max_diff(a, b) -> float:
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


@pytest.fixture(scope="module")
def curves():
    """Loss curves from one seed: ours, standard (float32) and standard in fp16 (the baseline)."""
    return dict(ours=_curve("ours"), standard=_curve("standard"), fp16=_curve("standard", _fp16_standard))


def test_ours_matches_standard_step_by_step(curves):
    # Both runs start from the same weights and see the same batches, so their losses differ only
    # by how rounding in attention propagates through the updates; the fp16 baseline goes through
    # the same propagation with PyTorch's own fp16 rounding (about 2.5e-4 at step 20 here).
    err = _max_diff(curves["ours"], curves["standard"])
    baseline = _max_diff(curves["fp16"], curves["standard"])
    steps = [i for i, (a, b) in enumerate(zip(curves["ours"], curves["standard"])) if abs(a - b) > 2 * baseline]
    assert err <= 2 * baseline + ABS_FLOOR, (
        f"ours is off standard by {err:.3g} (fp16 baseline {baseline:.3g}) at steps {steps}:\n"
        f"ours     {[round(x, 5) for x in curves['ours']]}\nstandard {[round(x, 5) for x in curves['standard']]}")


def test_loss_falls_on_the_synthetic_task(curves):
    # Guessing costs ln(128) = 4.85 nats; the chain's entropy is at most 1.11. Twenty steps at this
    # learning rate take standard attention's loss from 4.83 to about 3.6 (last five: about 3.74).
    losses = curves["ours"]
    assert abs(losses[0] - torch.log(torch.tensor(float(TINY.vocab))).item()) < 0.1, losses
    assert sum(losses[-5:]) / 5 < losses[0] - 0.5, losses


@pytest.mark.parametrize("name", ["flash", "OURS", "sdpa_efficient", ""])
def test_unknown_attention_is_refused(name):
    with pytest.raises(ValueError, match="sdpa_cudnn") as raised:
        GPT(TINY, attention=name)
    assert all(allowed in str(raised.value) for allowed in ATTENTIONS)
    with pytest.raises(ValueError):
        attention_function(name)


def test_model_flops_per_token_by_hand():
    # 12 L h^2 = 12 * 2 * 64^2 = 98304 block weights, V h = 128 * 64 = 8192 for the tied head;
    # 6 * (98304 + 8192) = 638976, plus the attention term 12 * L * h * s = 12 * 2 * 64 * 32 = 49152.
    assert training.matmul_params(TINY) == 106_496
    assert training.model_flops_per_token(TINY, 32) == 688_128
    assert training.model_flops_per_token(TINY, 64) == 688_128 + 49_152
    # the formula's P is the model's matmul weights: those of its Linear layers, the tied head once
    model = GPT(TINY, "standard")
    weights = {id(m.weight): m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear)}
    assert sum(weights.values()) == training.matmul_params(TINY)
    # the paper's 1.3B model: 24 layers, hidden 2048, 2k context
    gpt3 = GPTConfig(layers=24, hidden=2048, heads=16, vocab=50257, seqlen=2048)
    expected = 6 * (12 * 24 * 2048**2 + 50257 * 2048) + 12 * 24 * 2048 * 2048
    assert training.model_flops_per_token(gpt3, 2048) == expected


def test_fa1_forward_matches_ours(monkeypatch):
    import kernels.attention

    launches = []
    real_fa1_forward = kernels.attention.fa1_forward

    def counting(*args, **kwargs):
        launches.append(args[0].shape)
        return real_fa1_forward(*args, **kwargs)

    monkeypatch.setattr(kernels.attention, "fa1_forward", counting)
    tokens, _ = next(training.synthetic_batches(TINY, 2, TINY.seqlen, seed=3, device=DEVICE))
    with torch.no_grad():
        logits = {name: _model(name)(tokens) for name in ("ours", "ours_fa1", "standard")}
        fp16 = _model("standard", _fp16_standard)(tokens)
    assert len(launches) == TINY.layers, "ours_fa1 did not run FlashAttention-1's forward once per layer"
    baseline = (fp16 - logits["standard"]).abs().max().item()
    err = (logits["ours_fa1"] - logits["ours"]).abs().max().item()
    assert err <= 2 * baseline + ABS_FLOOR, f"fa1 vs ours {err:.3g}, fp16 baseline {baseline:.3g}"
    assert not torch.equal(logits["ours"], logits["standard"])  # the attention swap reached the model


def test_compile_fullgraph_with_ours():
    """The whole model with `ours` compiles with fullgraph=True (a graph break raises) and trains."""
    torch._dynamo.reset()
    graphs = []

    def counting_backend(graph, example_inputs):
        graphs.append(graph)
        backend = "inductor" if HAS_CUDA else "aot_eager"
        return torch._dynamo.lookup_backend(backend)(graph, example_inputs)

    tokens, targets = next(training.synthetic_batches(TINY, 2, TINY.seqlen, seed=4, device=DEVICE))
    model = _model("ours")
    compiled = torch.compile(model, fullgraph=True, backend=counting_backend)
    loss = compiled(tokens, targets)
    loss.backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    eager = model(tokens, targets)
    eager.backward()
    assert len(graphs) == 1
    torch.testing.assert_close(loss, eager, rtol=1e-4, atol=1e-5)
    for name, p in model.named_parameters():
        torch.testing.assert_close(grads[name], p.grad, rtol=1e-3, atol=1e-5, msg=lambda m: f"{name}: {m}")


def test_synthetic_batches_are_deterministic_and_shifted():
    first = next(training.synthetic_batches(TINY, 3, 16, seed=7))
    again = next(training.synthetic_batches(TINY, 3, 16, seed=7))
    other = next(training.synthetic_batches(TINY, 3, 16, seed=8))
    assert torch.equal(first[0], again[0]) and not torch.equal(first[0], other[0])
    tokens, targets = first
    assert tokens.shape == targets.shape == (3, 16)
    assert torch.equal(tokens[:, 1:], targets[:, :-1])
    # every transition is one the chain allows
    successors = training._markov_chain(TINY.vocab, training.TASK_SEED)
    allowed = (successors[tokens] == targets[..., None]).any(-1)
    assert allowed.all()


@pytest.mark.skipif(not HAS_CUDA, reason="time_training measures with CUDA events")
def test_time_training_reports_and_survives_oom(monkeypatch):
    result = training.time_training(TINY, "ours", batch=2, seqlen=TINY.seqlen, steps=3, warmup=1, device="cuda")
    assert result["status"] == "ok" and result["tokens_per_s"] > 0 and result["peak_mem_bytes"] > 0
    assert result["step_ms_min"] <= result["step_ms"] <= result["step_ms_max"]

    def out_of_memory(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory (simulated)")

    monkeypatch.setattr(training, "_timed_run", out_of_memory)
    result = training.time_training(TINY, "standard", batch=2, seqlen=TINY.seqlen, steps=3, warmup=1, device="cuda")
    assert result["status"] == "oom" and "simulated" in result["note"]
