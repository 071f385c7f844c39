"""The experiment stage: the grid of ablations, the attention providers under test, and the runners
that measure them into the tidy CSV files under results/ (see experiments/README.md)."""
