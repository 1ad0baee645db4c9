#!/usr/bin/env python3
"""The peer for dptrain's GPT (and Llama) step: the same model (GPT-2 style, pre-LayerNorm, tanh GELU, tied
head), AdamW with weight decay on matrices, global-norm clipping and batch, in PyTorch with the
batches already in memory (dptrain reads them from HDF5). Prints tokens/s. On the CPU by default;
--device cuda runs it on a GPU, where --precision bf16 is autocast to bf16 (fp32 master weights,
as dptrain's --precision bf16) and --attention sdpa uses PyTorch's fused attention
(scaled_dot_product_attention) instead of the same unfused products dptrain computes. --accum N
makes each step N micro-batches of B windows whose gradients add up before one update
(dptrain's --grad-accum). --arch llama makes it dptrain's --model llama instead: RMSNorm, rotary
positions (rotate-half, theta 10000), grouped-query attention (--kv-heads), a SwiGLU MLP of
--ffn width, no biases, tied head. --compile runs the model through torch.compile (PyTorch 2.0 or
later; its compilation happens in the warm-up steps, outside the timing).

usage: gpt_pytorch.py --threads T --batch B --block T --layers L --heads H --embd C --vocab V --steps N
                      [--accum N] [--device cpu|cuda] [--precision fp32|bf16] [--attention naive|sdpa]
                      [--arch gpt|llama] [--kv-heads K] [--ffn F] [--compile]
"""
import argparse
import os
import math
import time


p = argparse.ArgumentParser()
p.add_argument("--threads", type=int, default=1)
p.add_argument("--batch", type=int, default=12)
p.add_argument("--block", type=int, default=64)
p.add_argument("--layers", type=int, default=4)
p.add_argument("--heads", type=int, default=4)
p.add_argument("--embd", type=int, default=128)
p.add_argument("--vocab", type=int, default=65)
p.add_argument("--steps", type=int, default=50)
p.add_argument("--warmup", type=int, default=5)
p.add_argument("--accum", type=int, default=1)
p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
p.add_argument("--attention", choices=("naive", "sdpa"), default="naive")
p.add_argument("--arch", choices=("gpt", "llama"), default="gpt")
p.add_argument("--kv-heads", type=int, default=0)
p.add_argument("--ffn", type=int, default=0)
p.add_argument("--compile", action="store_true")
a = p.parse_args()
# torch.set_num_threads does not reach the BLAS library that Debian's PyTorch calls for its matrix
# products (OpenBLAS, with its own thread pool): without these the "1 thread" peer multiplied on
# every core. They must be set before torch loads.
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = str(a.threads)
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
torch.set_num_threads(a.threads)
if a.attention == "sdpa" and not hasattr(F, "scaled_dot_product_attention"):
    p.error(f"--attention sdpa needs PyTorch 2.0 or later (this is {torch.__version__}); use --attention naive")
if a.compile and not hasattr(torch, "compile"):
    p.error(f"--compile needs PyTorch 2.0 or later (this is {torch.__version__}); leave it out")
if a.device == "cuda" and not torch.cuda.is_available():
    p.error("--device cuda: PyTorch sees no GPU")
torch.manual_seed(0)
dev = torch.device(a.device)
if a.device == "cuda":
    # fp32 means fp32, as dptrain's --precision fp32 (no TF32 tensor cores).
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
B, T, C, NH, V, L = a.batch, a.block, a.embd, a.heads, a.vocab, a.layers


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc, self.fcproj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
        self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)))

    def forward(self, x):
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=-1)
        q, k, v = (t.view(B, T, NH, C // NH).transpose(1, 2) for t in (q, k, v))
        if a.attention == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) / math.sqrt(C // NH)
            y = att.masked_fill(~self.mask, float("-inf")).softmax(dim=-1) @ v
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class RMSNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(C))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * self.weight


KV, FF = a.kv_heads or NH, a.ffn or (8 * C // 3 + 63) // 64 * 64
HS = C // NH
_ang = torch.outer(torch.arange(T, dtype=torch.float32), 1.0 / 10000 ** (torch.arange(0, HS, 2).float() / HS))
COS, SIN = torch.cat([_ang.cos()] * 2, -1).to(dev), torch.cat([_ang.sin()] * 2, -1).to(dev)


def rope(x):
    return x * COS + torch.cat([-x[..., HS // 2:], x[..., :HS // 2]], -1) * SIN


class LlamaBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = RMSNorm(), RMSNorm()
        self.qkv, self.proj = nn.Linear(C, (NH + 2 * KV) * HS, bias=False), nn.Linear(C, C, bias=False)
        self.gate_up, self.down = nn.Linear(C, 2 * FF, bias=False), nn.Linear(FF, C, bias=False)
        self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)))

    def forward(self, x):
        q, k, v = self.qkv(self.ln1(x)).split([NH * HS, KV * HS, KV * HS], dim=-1)
        q = rope(q.view(B, T, NH, HS).transpose(1, 2))
        k = rope(k.view(B, T, KV, HS).transpose(1, 2)).repeat_interleave(NH // KV, dim=1)
        v = v.view(B, T, KV, HS).transpose(1, 2).repeat_interleave(NH // KV, dim=1)
        if a.attention == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) / math.sqrt(HS)
            y = att.masked_fill(~self.mask, float("-inf")).softmax(dim=-1) @ v
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        g, u = self.gate_up(self.ln2(x)).split(FF, dim=-1)
        return x + self.down(F.silu(g) * u)


class Llama(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.blocks = nn.ModuleList(LlamaBlock() for _ in range(L))
        self.lnf = RMSNorm()

    def forward(self, idx, targets):
        x = self.wte(idx)
        for b in self.blocks:
            x = b(x)
        logits = self.lnf(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.lnf = nn.LayerNorm(C)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = self.lnf(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))


model = (Llama() if a.arch == "llama" else GPT()).to(dev)
decay = [q for q in model.parameters() if q.dim() == 2]
other = [q for q in model.parameters() if q.dim() != 2]
if a.compile:
    model = torch.compile(model)  # the same parameters; compiled at the first (warm-up) step
opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}], lr=1e-3)
data = torch.randint(0, V, (16, B, T + 1), device=dev)


def step(i):
    opt.zero_grad(set_to_none=True)
    for k in range(a.accum):
        j = (i * a.accum + k) % 16
        with torch.autocast(a.device, dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = model(data[j, :, :T], data[j, :, 1:]) / a.accum
        loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()


def sync():
    if a.device == "cuda":
        torch.cuda.synchronize()


for i in range(a.warmup):
    step(i)
sync()
t0 = time.perf_counter()
for i in range(a.steps):
    step(i)
sync()
dt = time.perf_counter() - t0
where = f"threads={a.threads}" if a.device == "cpu" else \
    f"{torch.cuda.get_device_name()} {a.precision} attention={a.attention}{' compiled' if a.compile else ''}"
print(f"pytorch {torch.__version__} {a.arch} {where} B={B} T={T} L={L} H={NH} C={C} accum={a.accum}: "
      f"{a.steps * B * T * a.accum / dt:.0f} tokens/s ({1000 * dt / a.steps:.1f} ms/step)")
