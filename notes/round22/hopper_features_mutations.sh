#!/usr/bin/env bash
# Seven one-off mutations of the bounds in hopper_features_emulate.py (forward and backward tile walks, and the
# softmax guard); each must make it report a mismatch or a failed bound ("caught"), not any other error.
# Output: notes/round22/hopper_features_mutations.txt. PYTHON: the interpreter with torch (python3 by default).
#   PYTHONPATH=. PYTHON=.venv/bin/python bash notes/round22/hopper_features_mutations.sh
cd "$(dirname "$0")/../.."
for mut in 's/full_from = last - win_left$/full_from = last - win_left - 1/' 's/mask_from = min(first + win_right + 1, n_k)$/mask_from = min(first + win_right + 2, n_k)/' 's/n_tiles = cdiv(min(last + win_right + 1, n_k), block_n) - base/n_tiles = cdiv(min(last + win_right, n_k), block_n) - base/' 's/first_tile = max(min(block_row, n_q - 1) + off - win_left, 0) \/\/ block_n/first_tile = max(min(block_row, n_q - 1) + off - win_left + 1, 0) \/\/ block_n/' 's/m_use = torch.where(m_new == -math.inf, 0.0, m_new) if WINDOW else m_new/m_use = m_new/' 's/            m_start = max(key0 - off - win_right, 0) \/\/ block_m/            m_start = max(key0 - off - win_right + 1, 0) \/\/ block_m/' 's/            last_query = min(key0 + block_n, n_k) - 1 - off + win_left/            last_query = min(key0 + block_n, n_k) - 2 - off + win_left/'; do
  sed "$mut" notes/round22/hopper_features_emulate.py > /tmp/mut.py
  cmp -s /tmp/mut.py notes/round22/hopper_features_emulate.py && echo "NOT APPLIED: $mut"
  PYTHONPATH=. "${PYTHON:-python3}" /tmp/mut.py 400 > /tmp/mut.out 2>&1
  if grep -q "^MISMATCH\|^AssertionError" /tmp/mut.out; then verdict=caught; else verdict="NOT CAUGHT"; fi
  echo "$verdict: $(tail -1 /tmp/mut.out | cut -c1-100) <- $mut"
done
