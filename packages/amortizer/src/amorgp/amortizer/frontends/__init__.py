"""The front ends that build candidate batches and run the pipeline: the
:class:`~amorgp.amortizer.frontends.inference.Amortizer` (one dataset), many datasets
(buckets), grouped tables and their Dask form, the scikit-learn-style estimator, and
the checks and readers of their inputs.
"""
