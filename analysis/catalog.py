"""The figures the analysis draws: stable names, the results each one reads, and where its caption lives.

Kept free of heavy imports so that the Snakemake rules can read it when planning the workflow.
"""
from __future__ import annotations

from pathlib import Path

CAPTIONS_DIR = Path(__file__).with_name("captions")
BUILD_DIR = Path("analysis/build")
FIGURES_DIR = BUILD_DIR / "figures"
FIGURE_FORMATS = ("pdf", "png")

# figure name -> the results files (experiments) it is drawn from
FIGURES = {
    "speed_fwd": ("speed",),
    "speed_bwd": ("speed",),
    "speed_fwd_bwd": ("speed",),
    "memory": ("seqlen",),
    "tiles_fwd": ("tiles",),
    "tiles_bwd": ("tiles",),
    "recompute": ("recompute",),
    "causal": ("causal",),
    "fa1_to_fa2": ("fa1_vs_fa2",),
    "peak_fraction": ("speed", "ceiling"),
    "accuracy": ("accuracy",),
    "training": ("training",),  # and, beside it, training_loss.csv (the loss-agreement curves)
    "features": ("features",),
    "decode": ("decode",),
    "fp8": ("fp8",),
    "hopper": ("hopper",),
}


def caption_path(name: str) -> Path:
    return CAPTIONS_DIR / f"{name}.rst"


def caption(name: str) -> str:
    return " ".join(caption_path(name).read_text().split())


def figure_paths(name: str, figures_dir: str | Path = FIGURES_DIR) -> dict[str, Path]:
    return {fmt: Path(figures_dir) / f"{name}.{fmt}" for fmt in FIGURE_FORMATS}


def compare_inputs(folder: str, measured: list[str], ablations) -> list[str]:
    """The results files `snakemake compare` reads from `folder`: this host's results/ (`measured`, made
    by the experiment rules) when the folder is "results", else the ablations' CSVs that the folder holds."""
    folder = folder.rstrip("/")
    if folder == "results":
        return list(measured)
    found = [f"{folder}/{name}.csv" for name in ablations if Path(f"{folder}/{name}.csv").exists()]
    if not found:
        raise FileNotFoundError(f"compare: {folder}/ holds no results file (<ablation>.csv for {', '.join(ablations)}); "
                                "name a folder of results CSVs, e.g. results/archive/nvidia-h200")
    return found
