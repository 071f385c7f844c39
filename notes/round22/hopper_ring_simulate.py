"""The Hopper forward's shared-memory ring under a window, simulated: does every schedule finish?

kernels/_hopper.py (with notes/round22's patches) runs one producer warp and two consumer warpgroups around
a ring of STAGES K and V slots, each guarded by a "ready" barrier (the producer's TMA completes it) and an
"empty" barrier (both consumers arrive). Under a window each consumer works its own ring tiles [t0, n_tiles)
of the program's n_total and releases the others unread, before and after. A hang on the GPU costs a whole
device call, so this runs the three agents' barrier operations, in the kernel's order, through a model of
mbarrier phases (a wait on phase p passes once the barrier has left phase p; a barrier of count C leaves
its phase at its C-th arrival), with every interleaving choice made at random, for random shapes and
windows, both pipelines (OVERLAP or serial) and rings of 2 and 3 slots; and checks that each agent
finishes and each consumer computed exactly its own tiles.

    PYTHONPATH=. python3 notes/round22/hopper_ring_simulate.py [cases]
"""
from __future__ import annotations

import random
import sys
from pathlib import Path

from kernels.options import AttentionOptions

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hopper_features_emulate import HALF, consumer_tiles, program_tiles  # noqa: E402 (the kernel's ranges)

BLOCK_N = 128


class Barrier:
    def __init__(self, count):
        self.count, self.arrived, self.phase = count, 0, 0

    def arrive(self):
        self.arrived += 1
        if self.arrived == self.count:
            self.arrived, self.phase = 0, self.phase ^ 1


def producer(n_total, stages, bars):
    for i in range(n_total):
        slot, phase = i % stages, (i // stages) & 1
        yield ("wait", bars["k_empty"][slot], phase ^ 1)
        yield ("arrive", bars["k_ready"][slot])  # the TMA's completion
        yield ("wait", bars["v_empty"][slot], phase ^ 1)
        yield ("arrive", bars["v_ready"][slot])


def release(i, stages, bars):
    slot, phase = i % stages, (i // stages) & 1
    yield ("wait", bars["k_ready"][slot], phase)
    yield ("arrive", bars["k_empty"][slot])
    yield ("wait", bars["v_ready"][slot], phase)
    yield ("arrive", bars["v_empty"][slot])


def consumer(t0, n_tiles, n_total, stages, overlap, bars, done):
    """The consumer's barrier operations in _consumer's order (kernels/_hopper.py)."""
    for i in range(0, t0):
        yield from release(i, stages, bars)
    if overlap:
        slot = t0 % stages
        yield ("wait", bars["k_ready"][slot], (t0 // stages) & 1)
        yield ("arrive", bars["k_empty"][slot])
        done.append(t0)
        for i in range(t0 + 1, n_tiles):
            slot, prev = i % stages, (i - 1) % stages
            yield ("wait", bars["k_ready"][slot], (i // stages) & 1)
            yield ("wait", bars["v_ready"][prev], ((i - 1) // stages) & 1)
            yield ("arrive", bars["k_empty"][slot])
            yield ("arrive", bars["v_empty"][prev])
            done.append(i)
        last = (n_tiles - 1) % stages
        yield ("wait", bars["v_ready"][last], ((n_tiles - 1) // stages) & 1)
        yield ("arrive", bars["v_empty"][last])
    else:
        for i in range(t0, n_tiles):
            slot, phase = i % stages, (i // stages) & 1
            yield ("wait", bars["k_ready"][slot], phase)
            yield ("arrive", bars["k_empty"][slot])
            yield ("wait", bars["v_ready"][slot], phase)
            yield ("arrive", bars["v_empty"][slot])
            done.append(i)
    for i in range(n_tiles, n_total):
        yield from release(i, stages, bars)


def run(agents, rng) -> bool:
    """Step the agents in random order until all finish (True) or none can move (False: a hang)."""
    pending = {name: next(gen, None) for name, gen in agents.items()}
    while any(op is not None for op in pending.values()):
        ready = [name for name, op in pending.items()
                 if op is not None and (op[0] == "arrive" or op[1].phase != op[2])]
        if not ready:
            return False
        name = rng.choice(ready)
        op = pending[name]
        if op[0] == "arrive":
            op[1].arrive()
        pending[name] = next(agents[name], None)
    return True


def main(cases: int) -> int:
    rng = random.Random(22)
    programs = 0
    for case in range(cases):
        n_q, n_k = rng.randint(1, 1200), rng.randint(1, 1200)
        causal = rng.random() < 0.5
        left = rng.choice([-1, 0, 1, 63, 64, 127, 128, 129, 255, 1023, rng.randint(0, 900)])
        right = rng.choice([-1, 0, 1, 63, 127, 128, rng.randint(0, 900)])
        f = AttentionOptions(softmax_scale=1.0, causal=causal, window_left=left,
                             window_right=right).kernel_args(n_q, n_k, None, None, None)
        if not f["WINDOW"]:
            continue
        win_left, win_right = f["win_left"], f["win_right"]
        if n_q > n_k + win_right:
            continue  # refused by hopper_unsupported
        for block_row in range(0, n_q, 2 * HALF):
            first_tile, n_total = program_tiles(block_row, n_q, n_k, win_left, win_right, BLOCK_N, False, True)
            ranges = [consumer_tiles(block_row + which * HALF, n_q, n_k, win_left, win_right, BLOCK_N, first_tile,
                                     n_total, False, True)[1:3] for which in (0, 1)]
            for stages in (2, 3):
                for overlap in (True, False):
                    bars = {name: [Barrier(1 if "ready" in name else 2) for _ in range(stages)]
                            for name in ("k_ready", "k_empty", "v_ready", "v_empty")}
                    done = ([], [])
                    agents = {"producer": producer(n_total, stages, bars)}
                    for which in (0, 1):
                        t0, n_tiles = ranges[which]
                        agents[which] = consumer(t0, n_tiles, n_total, stages, overlap, bars, done[which])
                    if not run(agents, rng):
                        print(f"HANG: case {case} nq{n_q} nk{n_k} causal={causal} window=({left}, {right}) "
                              f"block_row={block_row} stages={stages} overlap={overlap} ranges={ranges} "
                              f"n_total={n_total}")
                        return 1
                    for which in (0, 1):
                        assert done[which] == list(range(*ranges[which])), (case, which, done[which], ranges)
            programs += 1
    print(f"{programs} programs of {cases} random windowed shapes: every interleaving tried finished, rings of 2 and "
          f"3 slots, both pipelines; each consumer computed exactly its own tiles")
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 300))
