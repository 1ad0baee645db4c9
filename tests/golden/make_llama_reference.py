#!/usr/bin/env python3
"""Writes tests/golden/llama_tiny.h5: a tiny Llama-style decoder computed by PyTorch, independently of dptrain.

The model is written here from torch primitives with the shapes of Hugging Face's LlamaForCausalLM:
RMSNorm (x * rsqrt(mean(x^2) + eps) * w), rotary embeddings on q and k in the rotate-half form
(pairs i, i + hs/2 of a head), grouped-query attention (query head h reads key/value head
h // (NH / KV)), a SwiGLU MLP (down(silu(gate(x)) * up(x))), no biases, an untied head, mean
cross-entropy. The file holds the config, the tokens, the parameters flattened in dptrain's layout
order (wte, per layer ln1.w qkv.w [q; k; v] proj.w ln2.w gate_up.w [gate; up] mlpproj.w, lnf.w,
lm_head.w), the logits, the loss, every gradient (same order), and the loss before each of 3 AdamW
steps plus the parameters after them (weight decay on 2-D tensors only, as dptrain does).
tests/unit/test_golden.cpp checks dptrain against it.

usage: /usr/bin/python3 tests/golden/make_llama_reference.py [OUT]   (needs python3-torch, h5py)
"""
import sys

import h5py
import numpy as np
import torch
import torch.nn.functional as F

V, T, L, NH, KV, C, FF, B = 13, 8, 2, 4, 2, 16, 24, 3
THETA, EPS_NORM = 500.0, 1e-5
HS = C // NH
# eps 1e-4 as the GPT reference's (make_gpt_reference.py says why).
LR, BETAS, EPS, WD, STEPS = 1e-2, (0.9, 0.95), 1e-4, 0.1, 3

torch.manual_seed(4321)
g = torch.Generator().manual_seed(4321)


def normal(*shape, std=0.02):
    return (torch.randn(*shape, generator=g) * std).requires_grad_()


def near_one(n):
    return (1 + torch.randn(n, generator=g) * 0.1).requires_grad_()


params = [("wte", normal(V, C, std=0.5))]
for l in range(L):
    p = f"h{l}."
    params += [
        (p + "ln1.weight", near_one(C)),
        (p + "attn.qkv.weight", normal((NH + 2 * KV) * HS, C, std=0.3)),
        (p + "attn.proj.weight", normal(C, C, std=0.3)),
        (p + "ln2.weight", near_one(C)),
        (p + "mlp.gate_up.weight", normal(2 * FF, C, std=0.3)),
        (p + "mlp.proj.weight", normal(C, FF, std=0.3)),
    ]
params += [("lnf.weight", near_one(C)), ("lm_head.weight", normal(V, C, std=0.3))]
P = dict(params)
tokens = torch.randint(0, V, (B, T + 1), generator=g)

inv_freq = 1.0 / (THETA ** (torch.arange(0, HS, 2, dtype=torch.float32) / HS))
angles = torch.outer(torch.arange(T, dtype=torch.float32), inv_freq)  # (T, HS/2)
cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)  # (T, HS)


def rms_norm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS_NORM) * w


def rotate(x):  # x (B, heads, T, HS)
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * cos + rotated * sin


def forward():
    x = P["wte"][tokens[:, :T]]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for l in range(L):
        p = f"h{l}."
        h = rms_norm(x, P[p + "ln1.weight"])
        q, k, v = F.linear(h, P[p + "attn.qkv.weight"]).split([NH * HS, KV * HS, KV * HS], dim=-1)
        q = rotate(q.view(B, T, NH, HS).transpose(1, 2))
        k = rotate(k.view(B, T, KV, HS).transpose(1, 2)).repeat_interleave(NH // KV, dim=1)
        v = v.view(B, T, KV, HS).transpose(1, 2).repeat_interleave(NH // KV, dim=1)
        att = (q @ k.transpose(-2, -1)) / HS**0.5
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + F.linear(y, P[p + "attn.proj.weight"])
        h = rms_norm(x, P[p + "ln2.weight"])
        gate, up = F.linear(h, P[p + "mlp.gate_up.weight"]).split(FF, dim=-1)
        x = x + F.linear(F.silu(gate) * up, P[p + "mlp.proj.weight"])
    logits = F.linear(rms_norm(x, P["lnf.weight"]), P["lm_head.weight"])
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

out = sys.argv[1] if len(sys.argv) > 1 else "tests/golden/llama_tiny.h5"
with h5py.File(out, "w") as f:
    for k, v in dict(vocab_size=V, block_size=T, n_layer=L, n_head=NH, n_kv_head=KV, n_embd=C, ffn_hidden=FF,
                     batch=B).items():
        f.attrs[k] = v
    for k, v in dict(rope_theta=THETA, norm_eps=EPS_NORM, lr=LR, beta1=BETAS[0], beta2=BETAS[1], eps=EPS,
                     weight_decay=WD).items():
        f.attrs[k] = v
    f.attrs["generator"] = f"tests/golden/make_llama_reference.py with torch {torch.__version__}"
    f["tokens"] = tokens.numpy().astype(np.int32)
    f["params"] = params0
    f["logits"] = logits.detach().numpy().astype(np.float32)
    f["loss"] = np.float32(loss.item())
    f["grads"] = grads0
    f["losses_adamw"] = np.array(losses, dtype=np.float32)
    f["params_adamw"] = flat([t for _, t in params])
print(f"wrote {out}: loss {loss.item():.6f}, {params0.size} parameters, AdamW losses {losses}")
