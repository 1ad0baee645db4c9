#!/usr/bin/env python3
"""Writes tests/golden/gpt_tiny.h5: a tiny GPT computed by PyTorch, independently of dptrain.

The model is written here from torch primitives (embedding, layer_norm, linear, tanh-GELU, causal
softmax attention, tied LM head, mean cross-entropy) with GPT-2 shapes. The file holds the
config, the tokens, the parameters flattened in dptrain's layout order (wte, wpe, per layer
ln1.w ln1.b qkv.w qkv.b proj.w proj.b ln2.w ln2.b fc.w fc.b mlpproj.w mlpproj.b, lnf.w lnf.b),
the logits, the loss, every gradient (same order), and the loss before each of 3 AdamW steps
plus the parameters after them (weight decay on 2-D tensors only, as dptrain does).
tests/unit/test_golden.cpp checks dptrain against it.

usage: /usr/bin/python3 tests/golden/make_gpt_reference.py [OUT]   (needs python3-torch, h5py)
"""
import math
import sys

import h5py
import numpy as np
import torch
import torch.nn.functional as F

V, T, L, NH, C, B = 11, 8, 2, 4, 16, 3
# eps 1e-4, not 1e-8: some gradients are exactly zero in exact arithmetic (the key bias: softmax ignores
# a shift shared by all keys) and only rounding noise in float32; with eps 1e-8 Adam would blow that
# noise up to full-size steps whose sign differs between any two implementations.
LR, BETAS, EPS, WD, STEPS = 1e-2, (0.9, 0.95), 1e-4, 0.1, 3

torch.manual_seed(1234)
g = torch.Generator().manual_seed(1234)


def normal(*shape, std=0.02):
    return (torch.randn(*shape, generator=g) * std).requires_grad_()


def const(value, *shape):
    return torch.full(shape, float(value)).requires_grad_()


# Random (not GPT-2-small) values everywhere, biases and LayerNorm parameters too, so that every
# gradient is exercised.
params = [("wte", normal(V, C, std=0.5)), ("wpe", normal(T, C, std=0.5))]
for l in range(L):
    p = f"h{l}."
    params += [
        (p + "ln1.weight", (1 + normal(C, std=0.1)).detach().requires_grad_()),
        (p + "ln1.bias", normal(C, std=0.1)),
        (p + "attn.qkv.weight", normal(3 * C, C, std=0.3)),
        (p + "attn.qkv.bias", normal(3 * C, std=0.1)),
        (p + "attn.proj.weight", normal(C, C, std=0.3)),
        (p + "attn.proj.bias", normal(C, std=0.1)),
        (p + "ln2.weight", (1 + normal(C, std=0.1)).detach().requires_grad_()),
        (p + "ln2.bias", normal(C, std=0.1)),
        (p + "mlp.fc.weight", normal(4 * C, C, std=0.3)),
        (p + "mlp.fc.bias", normal(4 * C, std=0.1)),
        (p + "mlp.proj.weight", normal(C, 4 * C, std=0.3)),
        (p + "mlp.proj.bias", normal(C, std=0.1)),
    ]
params += [("lnf.weight", (1 + normal(C, std=0.1)).detach().requires_grad_()), ("lnf.bias", normal(C, std=0.1))]
P = dict(params)
tokens = torch.randint(0, V, (B, T + 1), generator=g)


def gelu(x):
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def forward():
    x = P["wte"][tokens[:, :T]] + P["wpe"][torch.arange(T)]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    hs = C // NH
    for l in range(L):
        p = f"h{l}."
        h = F.layer_norm(x, (C,), P[p + "ln1.weight"], P[p + "ln1.bias"], eps=1e-5)
        qkv = F.linear(h, P[p + "attn.qkv.weight"], P[p + "attn.qkv.bias"])
        q, k, v = qkv.split(C, dim=-1)
        q, k, v = (t.view(B, T, NH, hs).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + F.linear(y, P[p + "attn.proj.weight"], P[p + "attn.proj.bias"])
        h = F.layer_norm(x, (C,), P[p + "ln2.weight"], P[p + "ln2.bias"], eps=1e-5)
        h = gelu(F.linear(h, P[p + "mlp.fc.weight"], P[p + "mlp.fc.bias"]))
        x = x + F.linear(h, P[p + "mlp.proj.weight"], P[p + "mlp.proj.bias"])
    x = F.layer_norm(x, (C,), P["lnf.weight"], P["lnf.bias"], eps=1e-5)
    logits = x @ P["wte"].t()
    loss = F.cross_entropy(logits.reshape(-1, V), tokens[:, 1:].reshape(-1))
    return logits, loss


def flat(tensors):
    return np.concatenate([t.detach().reshape(-1).numpy() for t in tensors]).astype(np.float32)


logits, loss = forward()
loss.backward()
params0 = flat([t for _, t in params])
grads0 = flat([t.grad for _, t in params])

decay = [t for n, t in params if t.dim() == 2]
no_decay = [t for n, t in params if t.dim() != 2]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": no_decay, "weight_decay": 0.0}],
                        lr=LR, betas=BETAS, eps=EPS)
losses = []
for step in range(STEPS):
    opt.zero_grad()
    _, l_ = forward()
    losses.append(l_.item())
    l_.backward()
    opt.step()

out = sys.argv[1] if len(sys.argv) > 1 else "tests/golden/gpt_tiny.h5"
with h5py.File(out, "w") as f:
    for k, v in dict(vocab_size=V, block_size=T, n_layer=L, n_head=NH, n_embd=C, batch=B).items():
        f.attrs[k] = v
    for k, v in dict(lr=LR, beta1=BETAS[0], beta2=BETAS[1], eps=EPS, weight_decay=WD).items():
        f.attrs[k] = v
    f.attrs["generator"] = f"tests/golden/make_gpt_reference.py with torch {torch.__version__}"
    f["tokens"] = tokens.numpy().astype(np.int32)
    f["params"] = params0
    f["logits"] = logits.detach().numpy().astype(np.float32)
    f["loss"] = np.float32(loss.item())
    f["grads"] = grads0
    f["losses_adamw"] = np.array(losses, dtype=np.float32)
    f["params_adamw"] = flat([t for _, t in params])
print(f"wrote {out}: loss {loss.item():.6f}, {params0.size} parameters, AdamW losses {losses}")
