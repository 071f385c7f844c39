"""The features ablation without a GPU: its grid, FLOP count, config checks, the arms' calls into the engine
(through a fake where the features are not in the engine yet), FlexAttention's masks and score mods, and one
tiny cell of each arm end to end through Triton's interpreter once flash_attention takes window_size."""
import copy
import inspect
import math

import pytest
import torch

import kernels
from experiments import features, flops, grid, measure, providers
from experiments.settings import ablation_settings, check, load_default
from test_kernels import DEVICE

CPU = torch.device("cpu")
HOST_DEVICE = torch.device(DEVICE)  # the GPU where there is one, else the CPU through the interpreter


@pytest.fixture
def settings():
    return ablation_settings(load_default(), ["features"])["features"]


def tiny(settings, **changes):
    """A grid small enough for Triton's interpreter: 2 heads of 32, lengths 64 and 96 (varlen 3 sequences)."""
    s = copy.deepcopy(settings)
    s.update(tokens=128, hidden=64, head_dim=32, seqlens=[64], window=16, repetitions=1,
             varlen={"sequences": 3, "min_len": 8, "max_len": 40, "heads": 2, "head_dim": 32, "seed": 0,
                     "causal": [False, True]})
    s.update(changes)
    return s


def one_pass(settings):
    return [cell for cell in grid.cells("features", settings, on_gpu=True) if cell.repetition == 0]


def test_default_grid_has_every_arm_once_per_shape(settings):
    cells = one_pass(settings)
    attention = [cell for cell in cells if cell.provider != "torch_matmul"]
    assert len(attention) == 80 and cells[0].provider == "torch_matmul"
    assert len({cell.key for cell in cells}) == len(cells)
    arms = {(cell.provider, cell.variant) for cell in attention}
    assert arms == {("ours", "plain"), ("ours", "window1024"), ("flex", "window1024"), ("ours", "softcap30"),
                    ("flex", "softcap30"), ("ours", "alibi"), ("flex", "alibi"), ("ours", "dropout0.1"),
                    ("sdpa_flash", "dropout0.1"), ("ours", "dropout_atomic_dq0.1"), ("ours", "varlen"),
                    ("ours", "padded"), ("flex", "varlen")}
    for cell in attention:
        assert cell.dtype == "fp16" and cell.head_dim == 128 and cell.mode in ("fwd", "fwd_bwd")
        if cell.variant.startswith("dropout_atomic_dq"):
            assert cell.mode == "fwd_bwd" and dict(cell.switches)["atomic_dq"] is True
        if cell.variant.startswith("window"):
            assert cell.causal and dict(cell.switches)["window_size"] == (1023, 0)
        if cell.variant not in ("varlen", "padded"):
            assert cell.batch * cell.seqlen_q == 16384 and cell.heads == 16
    assert len(grid.cells("features", settings, on_gpu=True)) == settings["repetitions"] * len(cells)


def test_varlen_cells_share_one_seeded_draw_of_lengths(settings):
    lengths = features.varlen_lengths(64, 128, 8192, 0)
    assert lengths == features.varlen_lengths(64, 128, 8192, 0) != features.varlen_lengths(64, 128, 8192, 1)
    assert len(lengths) == 64 and 128 <= min(lengths) and max(lengths) <= 8192
    assert max(lengths) / min(lengths) > 10  # mixed lengths, not a narrow band
    varlen = [cell for cell in one_pass(settings) if features.lengths_of(cell)]
    assert {features.lengths_of(cell) for cell in varlen} == {lengths}
    assert {(cell.batch, cell.seqlen_q, cell.heads) for cell in varlen} == {(64, max(lengths), 16)}
    assert "64 sequences" in features.note(varlen[0])


def test_flex_and_features_can_be_left_out(settings):
    without_flex = one_pass({**settings, "flex": False})
    assert not [cell for cell in without_flex if cell.provider == "flex"]
    only_window = one_pass({**settings, "include": ["window"]})
    assert {cell.variant for cell in only_window} == {"default", "window1024", "plain"}
    assert all(cell.causal for cell in only_window if cell.head_dim)


@pytest.mark.parametrize("variant, family", [("window1024", "window"), ("softcap30", "softcap"),
                                             ("dropout0.1", "dropout"), ("alibi", "alibi"), ("plain", "plain")])
def test_variants_name_their_feature(variant, family):
    from analysis.features import feature_of

    assert features.feature_of(variant) == feature_of(variant) == family


def test_visible_pairs_count_the_unmasked_entries():
    assert flops.visible_pairs(8, 8, False) == 64
    assert flops.visible_pairs(8, 8, True) == 36
    assert flops.visible_pairs(16, 16, True, (3, 0)) == 1 + 2 + 3 + 4 * 13
    assert flops.visible_pairs(4, 8, True) == 5 + 6 + 7 + 8  # bottom-right alignment
    assert flops.visible_pairs(8, 8, False, (1, 1)) == 8 * 3 - 2
    # the paper's count with no mask; causal within 1/N of its half
    assert flops.pairs_flops(2, 8 * 8, 64, "fwd_bwd") == flops.attention_flops(1, 2, 8, 8, 64, False, "fwd_bwd")
    n = 4096
    assert flops.visible_pairs(n, n, True) / (n * n / 2) == pytest.approx(1 + 1 / n)


def test_cell_flops_count_the_window_and_the_real_sequences(settings):
    cells = {(cell.provider, cell.variant, cell.mode, cell.causal, cell.seqlen_q): cell for cell in one_pass(settings)}
    window = cells[("ours", "window1024", "fwd", True, 16384)]
    plain = cells[("ours", "plain", "fwd", True, 16384)]
    assert features.cell_flops(plain) / features.cell_flops(window) == pytest.approx(16384 / 2 / 1024, rel=0.05)
    lengths = features.varlen_lengths(64, 128, 8192, 0)
    varlen = [cell for key, cell in cells.items() if key[1] in ("varlen", "padded") and key[2] == "fwd"
              and not key[3]]
    expected = 4.0 * 16 * sum(n * n for n in lengths) * 128
    assert {features.cell_flops(cell) for cell in varlen} == {expected}  # packed, padded and flex alike


def test_config_refuses_a_bad_features_section():
    config = load_default()
    config["features"]["include"] = ["window", "rope"]
    with pytest.raises(ValueError, match="features.include"):
        check(config)
    config = load_default()
    config["features"]["head_dim"] = 96
    with pytest.raises(ValueError, match="features.head_dim"):
        check(config)


class FakeEngine:
    """Records the calls that the arms make into the engine, and answers with zeros of q's shape."""

    def __init__(self):
        self.calls = []

    def dense(self, q, k, v, causal=False, softmax_scale=None, return_lse=False, **options):
        self.calls.append(("flash_attention", dict(options, causal=causal)))
        return q * 0

    def varlen(self, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, **options):
        self.calls.append(("flash_attn_varlen_func", dict(options, cu_seqlens_q=cu_seqlens_q.tolist(),
                                                           max_seqlen_q=max_seqlen_q, shape=tuple(q.shape))))
        return q * 0


@pytest.fixture
def engine(monkeypatch):
    fake = FakeEngine()
    monkeypatch.setattr(kernels, "flash_attention", fake.dense)
    monkeypatch.setattr(kernels, "flash_attn_varlen_func", fake.varlen)
    return fake


def test_each_arm_of_ours_passes_its_feature_to_the_engine(settings, engine):
    s = tiny(settings)
    cells = [cell for cell in one_pass(s) if cell.provider == "ours" and cell.mode == "fwd" and cell.causal]
    for cell in cells:
        q, k, v, _ = providers.inputs(cell, CPU)
        providers.attention(cell, CPU)(q, k, v)
    calls = {cell.variant: call for cell, call in zip(cells, engine.calls)}
    defaults = {"causal": True}
    assert calls["plain"] == ("flash_attention", defaults)  # the engine's defaults: no kernel pinned
    assert not any("hopper" in options or "hopper_backward" in options for _, options in engine.calls)
    assert calls["window16"][1]["window_size"] == (15, 0)
    assert calls["softcap30"][1]["softcap"] == 30.0
    assert calls["dropout0.1"][1]["dropout_p"] == 0.1
    slopes = calls["alibi"][1]["alibi_slopes"]
    assert slopes.dtype == torch.float32 and slopes.tolist() == pytest.approx([2 ** -4, 2 ** -8])
    lengths = features.varlen_lengths(3, 8, 40, 0)
    name, varlen = calls["varlen"]
    assert name == "flash_attn_varlen_func" and varlen["causal"] is True
    assert varlen["cu_seqlens_q"] == [0, lengths[0], lengths[0] + lengths[1], sum(lengths)]
    assert varlen["shape"] == (sum(lengths), 2, 32) and varlen["max_seqlen_q"] == max(lengths)
    assert calls["padded"] == ("flash_attention", defaults)
    assert [features.engine_features(cell) for cell in cells] == [
        {"plain": (), "window16": ("window_size",), "softcap30": ("softcap",), "alibi": ("alibi_slopes",),
         "dropout0.1": ("dropout_p",), "varlen": None, "padded": ()}[cell.variant] for cell in cells]


def test_tile_columns_name_the_kernel_the_defaults_pick_for_a_feature(settings, monkeypatch):
    """On sm_90 a features row records the Hopper forward's tiles only where HOPPER_FORWARD_FEATURES names all
    of its cell's features (and the backward's likewise); the packed arm always runs the portable kernels."""
    from kernels import _hopper
    from kernels import attention as engine

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(engine, "_is_sm90", lambda index: True)
    monkeypatch.setattr(engine, "_interpreter_on", lambda: False)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(engine, "HOPPER_FORWARD_FEATURES", frozenset({"softcap"}))
    monkeypatch.setattr(engine, "HOPPER_BACKWARD_FEATURES", frozenset())
    varlen = dict(tiny(settings)["varlen"], head_dim=128)
    cells = {cell.variant: cell for cell in one_pass(tiny(settings, head_dim=128, hidden=256, varlen=varlen))
             if cell.provider == "ours" and cell.mode == "fwd" and not cell.causal}
    hopper_tiles = {(_hopper.BLOCK_M, _hopper.TOTAL_WARPS)}
    ran = {variant: {(providers.tile_columns(cell)["block_m"], providers.tile_columns(cell)["num_warps"])}
           == hopper_tiles for variant, cell in cells.items()}
    assert ran["plain"] and ran["softcap30"] and ran["padded"]
    assert not ran["alibi"] and not ran["dropout0.1"] and not ran["varlen"]


def test_gpu_peers_are_unsupported_on_the_cpu(settings):
    for cell in one_pass(tiny(settings)):
        if cell.provider in ("flex", "sdpa_flash"):
            with pytest.raises(providers.Unsupported):
                providers.attention(cell, CPU)


def test_a_row_counts_the_cells_visible_flops_and_notes_the_lengths(settings, engine, monkeypatch):
    monkeypatch.setattr(measure, "_bench", lambda fn, timing, held=0: {"ms": 2.0})
    for cell in one_pass(tiny(settings, modes=["fwd"])):
        if cell.provider == "ours":
            values = measure.attention(cell, {"warmup_ms": 1, "rep_ms": 1}, CPU)
            assert values["tflops"] == pytest.approx(features.cell_flops(cell) / 2e-3 / 1e12)
            assert ("sequences" in values.get("note", "")) == (cell.variant in ("varlen", "padded"))


def _grid_indices(n, device="cpu"):
    idx = torch.arange(n, device=device)
    return idx[:, None], idx[None, :]


def test_flex_masks_and_score_mods_mean_the_engines_features(settings):
    s = tiny(settings)
    cells = {(cell.provider, cell.variant, cell.causal): cell for cell in one_pass(s) if cell.mode == "fwd"}
    q_idx, kv_idx = _grid_indices(64)
    _, mask, length = features.flex_mods(cells[("flex", "window16", True)], CPU)
    visible = mask(0, 0, q_idx, kv_idx)
    assert length == 64 and int(visible.sum()) == flops.visible_pairs(64, 64, True, (15, 0))
    assert visible[40, 25] and not visible[40, 24] and not visible[40, 41]
    score_mod, mask, _ = features.flex_mods(cells[("flex", "softcap30", False)], CPU)
    assert mask is None
    assert float(score_mod(torch.tensor(60.0), 0, 0, 0, 0)) == pytest.approx(30 * math.tanh(2))
    score_mod, mask, _ = features.flex_mods(cells[("flex", "alibi", True)], CPU)
    assert mask(0, 0, q_idx, kv_idx).equal(q_idx >= kv_idx)
    assert float(score_mod(torch.tensor(1.0), 0, torch.tensor(1), torch.tensor(10), torch.tensor(3))) == \
        pytest.approx(1 - 7 * 2 ** -8)
    lengths = features.varlen_lengths(3, 8, 40, 0)
    _, mask, length = features.flex_mods(cells[("flex", "varlen", True)], CPU)
    q_idx, kv_idx = _grid_indices(length)
    assert length == sum(lengths)
    assert int(mask(0, 0, q_idx, kv_idx).sum()) == sum(n * (n + 1) // 2 for n in lengths)


# ---------------------------------------------------------------- end to end, once the engine has the features

HAS_FEATURES = "window_size" in inspect.signature(kernels.flash_attention).parameters


def _reference(q, k, v, causal, window=None, softcap=0.0, slopes=None):
    q, k, v = (t.detach().float() for t in (q, k, v))
    n = q.shape[-2]
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if softcap:
        scores = softcap * torch.tanh(scores / softcap)
    i, j = _grid_indices(n, q.device)
    if slopes is not None:
        scores = scores - slopes.float()[:, None, None] * (i - j).abs()
    visible = torch.ones(n, n, dtype=torch.bool, device=q.device)
    if causal:
        visible &= j <= i
    if window is not None:
        visible &= i - j <= window
    return torch.softmax(scores.masked_fill(~visible, float("-inf")), dim=-1) @ v


@pytest.mark.skipif(not HAS_FEATURES, reason="kernels.flash_attention has no window_size yet (features not merged)")
def test_tiny_features_cells_run_end_to_end(settings):
    """On the interpreter without a GPU, on the GPU where there is one."""
    s = tiny(settings, modes=["fwd_bwd"], causal=[True])
    lengths = features.varlen_lengths(3, 8, 40, 0)
    for cell in one_pass(s):
        if cell.provider != "ours":
            continue
        attend = providers.attention(cell, HOST_DEVICE)
        q, k, v, do = providers.inputs(cell, HOST_DEVICE)
        o = attend(q, k, v)
        grads = torch.autograd.grad(o, (q, k, v), do)
        assert all(torch.isfinite(t.float()).all() for t in (o, *grads)), cell.label
        options = dict(cell.switches)
        if cell.variant == "varlen":
            start = 0
            for n in lengths:
                part = [t[start:start + n].transpose(0, 1)[None] for t in (q, k, v)]
                expected = _reference(*part, causal=cell.causal)[0].transpose(0, 1)
                torch.testing.assert_close(o[start:start + n].float(), expected, atol=2e-2, rtol=2e-2)
                start += n
        elif cell.variant != "padded" and "dropout_p" not in options:
            slopes = features._slopes(cell, HOST_DEVICE) if options.get("alibi") else None
            window = options["window_size"][0] if "window_size" in options else None
            expected = _reference(q, k, v, cell.causal, window, options.get("softcap", 0.0), slopes)
            torch.testing.assert_close(o.float(), expected, atol=2e-2, rtol=2e-2)
