#!/usr/bin/env python3
"""The peer for dptrain's attention kernels (tests/gpu/bench_ops.cu's "attention", the GPU check's
bench-attention step): PyTorch's fused causal scaled_dot_product_attention in bf16 at the same shape
(B=8, T=1024, 12 heads of 64 by default), forward and backward together and apart, in ms and in
TFLOP/s counted two ways: the full T x T products (bench_ops' count, so the ms compare directly)
and the causal half (the count FlashAttention's papers use). Also reports which of PyTorch's
kernels it took where it can tell (flash, memory-efficient, cuDNN).

usage: attention_pytorch.py [--batch 8] [--block 1024] [--heads 12] [--head-size 64] [--reps 20]
"""
import argparse

p = argparse.ArgumentParser()
p.add_argument("--batch", type=int, default=8)
p.add_argument("--block", type=int, default=1024)
p.add_argument("--heads", type=int, default=12)
p.add_argument("--head-size", type=int, default=64)
p.add_argument("--reps", type=int, default=20)
p.add_argument("--warmup", type=int, default=3)
a = p.parse_args()

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

if not torch.cuda.is_available():
    p.error("PyTorch sees no GPU")
if not hasattr(F, "scaled_dot_product_attention"):
    p.error(f"scaled_dot_product_attention needs PyTorch 2.0 or later (this is {torch.__version__})")

B, T, NH, hs = a.batch, a.block, a.heads, a.head_size
dev = torch.device("cuda")
gen = torch.Generator(device=dev).manual_seed(0)
q, k, v = (torch.randn(B, NH, T, hs, device=dev, dtype=torch.bfloat16, generator=gen).requires_grad_() for _ in range(3))
dout = torch.randn(B, NH, T, hs, device=dev, dtype=torch.bfloat16, generator=gen)


def forward():
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def both():
    out = forward()
    out.backward(dout)


def backward_only(out):
    torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)


def mean_ms(fn):
    for _ in range(a.warmup):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(a.reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / a.reps


ms_both = mean_ms(both)
ms_fwd = mean_ms(forward)
out = forward()
ms_bwd = mean_ms(lambda: backward_only(out))

# Six products of 2 B NH T^2 hs FLOP (two forward, four backward), counted in full as bench_ops does;
# the causal half is what the fused kernels compute.
full = 6.0 * 2.0 * B * NH * T * T * hs
causal = full / 2


def tflops(flop, ms):
    return flop / (ms * 1e-3) / 1e12


kernel = "unknown"
try:  # torch >= 2.0: which fused kernel SDPA may take at these inputs
    from torch.backends.cuda import SDPAParams, can_use_flash_attention, can_use_efficient_attention  # noqa: E402
    params = SDPAParams(q, k, v, None, 0.0, True)
    kernel = "flash" if can_use_flash_attention(params) else "efficient" if can_use_efficient_attention(params) else "math"
except Exception:  # older PyTorch: the helpers are absent or take other arguments
    pass

print(f"pytorch {torch.__version__} {torch.cuda.get_device_name()} scaled_dot_product_attention (causal, bf16, "
      f"{kernel}) B={B} T={T} NH={NH} hs={hs}, {a.reps} reps after {a.warmup}")
print(f"fwd+bwd {ms_both:8.3f} ms  {tflops(full, ms_both):7.1f} TFLOP/s full T x T count, "
      f"{tflops(causal, ms_both):7.1f} causal")
print(f"fwd     {ms_fwd:8.3f} ms  {tflops(full / 3, ms_fwd):7.1f} TFLOP/s full count, {tflops(causal / 3, ms_fwd):7.1f} causal")
print(f"bwd     {ms_bwd:8.3f} ms  {tflops(2 * full / 3, ms_bwd):7.1f} TFLOP/s full count, "
      f"{tflops(2 * causal / 3, ms_bwd):7.1f} causal")
print(f"RESULT pytorch sdpa attention fwd+bwd (B={B}, T={T}): {ms_both:.2f} ms (forward {ms_fwd:.2f}, "
      f"backward {ms_bwd:.2f}), {tflops(causal, ms_both):.1f} TFLOP/s causal")
