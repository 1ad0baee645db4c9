#!/usr/bin/env python3
"""The peer for dptrain's MLP step: the same model (32 -> 256 -> 256 -> 10, ReLU), AdamW, global
grad-norm clipping and batch, in PyTorch on the CPU, with data already in memory (dptrain reads
its batches from HDF5). Prints samples/s over the timed steps. --accum N makes each step N
micro-batches of B rows whose gradients add up before one update (dptrain's --grad-accum).

usage: mlp_pytorch.py --threads T --batch B --steps N [--accum N] [--in 32 --hidden 256,256 --classes 10]
"""
import argparse
import os
import time

p = argparse.ArgumentParser()
p.add_argument("--threads", type=int, default=1)
p.add_argument("--batch", type=int, default=64)
p.add_argument("--steps", type=int, default=2000)
p.add_argument("--accum", type=int, default=1)
p.add_argument("--warmup", type=int, default=200)
p.add_argument("--in", dest="inp", type=int, default=32)
p.add_argument("--hidden", default="256,256")
p.add_argument("--classes", type=int, default=10)
a = p.parse_args()
# torch.set_num_threads does not reach the BLAS library that Debian's PyTorch calls for its matrix
# products (OpenBLAS, with its own thread pool): without these the "1 thread" peer multiplied on
# every core. They must be set before torch loads.
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = str(a.threads)
import torch  # noqa: E402
torch.set_num_threads(a.threads)
torch.manual_seed(0)
dims = [a.inp] + [int(h) for h in a.hidden.split(",")] + [a.classes]
layers = []
for i in range(len(dims) - 1):
    layers.append(torch.nn.Linear(dims[i], dims[i + 1]))
    if i + 2 < len(dims):
        layers.append(torch.nn.ReLU())
model = torch.nn.Sequential(*layers)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
loss_fn = torch.nn.CrossEntropyLoss()
pool = 64
xs = torch.randn(pool, a.batch, a.inp)
ys = torch.randint(0, a.classes, (pool, a.batch))


def step(i):
    opt.zero_grad(set_to_none=False)
    for k in range(a.accum):
        j = (i * a.accum + k) % pool
        loss = loss_fn(model(xs[j]), ys[j]) / a.accum
        loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()


for i in range(a.warmup):
    step(i)
t0 = time.perf_counter()
for i in range(a.steps):
    step(i)
dt = time.perf_counter() - t0
print(f"pytorch {torch.__version__} threads={a.threads} batch={a.batch} accum={a.accum}: "
      f"{a.steps * a.batch * a.accum / dt:.0f} samples/s "
      f"({1000 * dt / a.steps:.3f} ms/step)")
