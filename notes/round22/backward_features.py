"""Which training features the default Hopper backward takes (`HOPPER_BACKWARD_FEATURES`), from the probe.

    python3 notes/round22/backward_features.py decide PROBE.csv...   # prints the names, comma-separated
    python3 notes/round22/backward_features.py apply NAMES           # writes them into kernels/attention.py

`decide` reads the probe's forward+backward rows (notes/round22/hopper_features_probe.py) and names a
feature when the Hopper backward after the Hopper forward (arm `hopper`) is faster than the portable
backward after it (arm `hopper_fwd`) in every row of every probe feature that uses it alone (the window:
window1024; softcap: softcap30 and softcap30_causal) at every head dim and length in the files; a feature
with no such rows is not named. ALiBi is not a candidate: its forward stays portable by default
(HOPPER_FORWARD_FEATURES), so its backward would run after the portable forward, which the probe does not time.

`apply` rewrites the HOPPER_BACKWARD_FEATURES assignment and its comment, so that a tree the device edits
with it equals the commit made locally with it (the grid's rows name that commit).
"""
import csv
import re
import sys
from pathlib import Path

CANDIDATES = {"window_size": ("window1024",), "softcap": ("softcap30", "softcap30_causal")}
ATTENTION = Path(__file__).resolve().parents[2] / "kernels" / "attention.py"


def decide(paths: list[str]) -> list[str]:
    ms = {}
    for path in paths:
        with open(path) as handle:
            for row in csv.reader(line for line in handle if not line.startswith("#")):
                if row and row[0] == "fwd_bwd":
                    mode, head_dim, feature, seqlen, arm, time, _ = row
                    ms[(int(head_dim), feature, int(seqlen), arm)] = float(time)
    named = []
    for name, features in CANDIDATES.items():
        cells = {(d, f, n) for (d, f, n, arm) in ms if f in features and arm == "hopper"}
        wins = [(d, f, n) for (d, f, n) in cells if ms.get((d, f, n, "hopper_fwd"), 0.0) > ms[(d, f, n, "hopper")]]
        for d, f, n in sorted(cells):  # the speed over the portable backward after the Hopper forward, per cell
            print(f"# d{d} {f} {n}: {ms.get((d, f, n, 'hopper_fwd'), float('nan')) / ms[(d, f, n, 'hopper')]:.3f}x",
                  file=sys.stderr)
        if cells and len(wins) == len(cells):
            named.append(name)
    return named


def apply(names: list[str]) -> None:
    names = sorted(names)
    others = [name for name in CANDIDATES if name not in names]
    spoken = {"window_size": "the sliding window", "softcap": "softcap"}
    if names:
        which = " and ".join(spoken[name] for name in names)
        rest = (f"; {' and '.join(spoken[name] for name in others)} did not, and ALiBi" if others else "; ALiBi")
        comment = (f"# The same for the Hopper backward (kernels/_hopper_bwd.py), which has them too at head dims 64 and 128:\n"
                   f"# with {which} it beats the portable backward after the Hopper forward at every length timed\n"
                   f"# there{rest}, whose forward stays portable, is not timed after it\n"
                   "# (notes/round22/h200/hopper_features_probe*_h200.csv, notes/round22/backward_features.py).\n")
    else:
        comment = ("# The same for the Hopper backward (kernels/_hopper_bwd.py), which has them too at head dims 64 and 128:\n"
                   "# none, as neither the window nor softcap made it faster than the portable backward after the Hopper\n"
                   "# forward at every length timed (notes/round22/h200/hopper_features_probe*_h200.csv,\n"
                   "# notes/round22/backward_features.py).\n")
    value = "frozenset({" + ", ".join(f'"{name}"' for name in names) + "})" if names else "frozenset()"
    text = ATTENTION.read_text()
    pattern = re.compile(r"# The same for the Hopper backward \(kernels/_hopper_bwd\.py\).*?\nHOPPER_BACKWARD_FEATURES = [^\n]*\n",
                         re.S)
    text, count = pattern.subn(lambda _: comment + f"HOPPER_BACKWARD_FEATURES = {value}\n", text)
    if count != 1:
        sys.exit(f"{ATTENTION}: no HOPPER_BACKWARD_FEATURES assignment with its comment")
    ATTENTION.write_text(text)


if __name__ == "__main__":
    command, *rest = sys.argv[1:]
    if command == "decide":
        print(",".join(sorted(decide(rest))))
    elif command == "apply":
        apply([name for name in (rest[0] if rest else "").split(",") if name])
    else:
        sys.exit(__doc__)
