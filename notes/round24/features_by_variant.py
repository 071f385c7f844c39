"""Our `features` cells of one run against another's, by variant and mode (ratio = candidate / baseline ms).

    python -m analysis.compare BASELINE CANDIDATE --out /tmp/cmp_features --ablations features
    python3 notes/round24/features_by_variant.py /tmp/cmp_features/compare.csv > notes/round24/h200/preview/features_by_variant.csv
"""
import sys

import pandas as pd

cells = pd.read_csv(sys.argv[1])
ours = cells[cells.provider == "ours"]
table = ours.groupby(["variant", "mode"]).agg(cells=("ratio", "size"), median_ratio=("ratio", "median"),
                                               min_ratio=("ratio", "min"), max_ratio=("ratio", "max"),
                                               verdicts=("verdict", lambda v: "+".join(sorted(set(v)))))
print(table.round(3).to_csv(), end="")
