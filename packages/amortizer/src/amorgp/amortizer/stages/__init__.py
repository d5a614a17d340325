"""The pipeline (:mod:`amorgp.amortizer.stages.pipeline`) and its stages over a
candidate batch: kernel matrices and factors, the calibration of scale and noise, the
starts (periodogram, null starts, multi-start), constraints, the refinement (the
objective, Fisher scoring, L-BFGS) and the results.
"""
