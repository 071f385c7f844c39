"""Analysis stage: results/*.csv -> tables, figures and claim verdicts under analysis/build/.

Reads only the tidy results CSVs (schema in results/README.md) and the data files beside this package
(claims.yaml, hardware.yaml, captions/); never imports the kernels or the experiments.
"""
