"""More tile candidates for the portable backward at head dim 256 on an sm_90 GPU (v19): the bwd_tiles cells of
hopper_head_dims_probe.py (d256 forward+backward, full and causal, 2k and 8k) with 16-warp and one-stage tiles
beside 64 x 64 x 8 x 2. A candidate that does not fit (shared memory, registers) prints a comment and is skipped.
  PYTHONPATH=. python3 notes/round19/d256_bwd_tiles_probe.py > $OUT/d256_bwd_tiles_probe_h200.csv
"""
import hopper_head_dims_probe as probe

probe.HEAD_DIMS = (256,)
probe.SEQLENS = ()
probe.BWD_TILES = [(64, 64, 8, 2), (64, 64, 16, 2), (32, 64, 4, 2), (128, 64, 16, 1), (64, 128, 16, 1),
                   (128, 64, 8, 1), (32, 128, 8, 2), (128, 32, 8, 2)]

if __name__ == "__main__":
    probe.main()
