"""Exact GP prediction at n = 100,000 with the KeOps backend (O(n) memory).

Run: ``python packages/lazy-kernels/examples/predict_100k.py [n]``
"""

from __future__ import annotations

import resource
import sys
import time

import torch

from amorgp.lazy_kernels import DimWiseKernel, Posterior

n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
g = torch.Generator().manual_seed(0)
X = torch.rand(n, 1, generator=g, dtype=torch.float64)
y = torch.sin(12 * X[:, 0]) + 0.1 * torch.randn(n, generator=g, dtype=torch.float64)

# SE kernel, variance 1, lengthscale 0.1; noise variance 0.01
kernel = DimWiseKernel("SE", {"d0.0.SE.variance": 1.0, "d0.0.SE.lengthscale": 0.1}, n_dims=1)
post = Posterior.from_kernel(kernel, X, y, 0.01, backend="auto", precond_rank=128, cg_tol=1e-6)
print(f"n = {n}, solver = {type(post.solver).__name__}")

X_test = torch.linspace(0.05, 0.95, 5, dtype=torch.float64)[:, None]
t0 = time.perf_counter()
mean, var = post.predict(X_test)
elapsed = time.perf_counter() - t0
assert var is not None
print(f"predict: {elapsed:.1f} s, CG iterations of the last solve: {post.last_cg_iterations}")
print("x      mean     truth    std")
for x, m, v in zip(X_test[:, 0], mean, var):
    print(f"{x:.2f}  {m:+.4f}  {torch.sin(12 * x):+.4f}  {v.sqrt():.4f}")
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10
print(
    f"peak resident memory: {peak:.0f} MiB (a dense kernel matrix would need {8 * n * n / 2**30:.0f} GiB)"
)
