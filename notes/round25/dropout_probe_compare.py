"""Compare two runs of notes/round24/dropout_probe.py made in one device call (two trees, same GPU).

    python3 notes/round25/dropout_probe_compare.py BEFORE.csv AFTER.csv > compare.csv

Per (mode, causal, seqlen): our dropout against SDPA flash with dropout (ratio > 1: ours faster) in each run,
the after run's speedup over the before run, and the after run's dropout time over our portable plain kernels."""
import sys

import pandas as pd

KEY = ["mode", "causal", "seqlen"]


def table(path):
    return pd.read_csv(path, comment="#").pivot_table(index=KEY, columns="arm", values="ms")


before, after = table(sys.argv[1]), table(sys.argv[2])
out = pd.DataFrame({
    "before_ms": before.ours_dropout,
    "after_ms": after.ours_dropout,
    "after_speedup": before.ours_dropout / after.ours_dropout,
    "before_vs_sdpa_flash": before.sdpa_flash_dropout / before.ours_dropout,
    "after_vs_sdpa_flash": after.sdpa_flash_dropout / after.ours_dropout,
    "after_over_portable_plain": after.ours_dropout / after.ours_portable,
    "after_tile128_over_default": after.get("ours_dropout_tile128") / after.ours_dropout,
})
out.round(3).to_csv(sys.stdout)
