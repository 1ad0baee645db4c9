#!/usr/bin/env python3
"""The independent side of llama.sh: a Llama in Hugging Face's LlamaForCausalLM layout, read by
PyTorch code that shares nothing with dptrain (its safetensors reader is hf_reference.py's).

  hf_llama_reference.py logits DIR IDS OUT.npy
      reads DIR/config.json and DIR/model.safetensors, builds the model from torch primitives
      (RMSNorm, rotate-half rotary embeddings with Llama 3's frequency scaling when rope_scaling
      asks, grouped-query attention, SwiGLU, lm_head or the tied embedding) and saves the logits of
      the comma-separated IDS, (n, vocab) float32
  hf_llama_reference.py rewrite SRC OUT
      writes SRC's weights as LlamaForCausalLM's state_dict has them in transformers releases that
      kept rotary buffers (each layer's self_attn.rotary_emb.inv_freq, tensors in sorted order, with
      this writer's own safetensors code), and a config.json asking for Llama 3's rope scaling
      (factor 8, low 1, high 4, original 64 positions: at head size 16 and theta 500 the two
      highest frequencies kept, the next blended, the rest slowed)
  hf_llama_reference.py val-loss DIR DATA
      the mean next-token loss over DATA's val windows (each shard's /tokens cut as dptrain cuts
      them: window i is tokens [i T, i T + T], T = max_position_embeddings), printed with 7 digits
"""
import glob
import json
import math
import os
import sys

import h5py
import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from hf_reference import read_safetensors, write_safetensors  # noqa: E402


def load(d):
    cfg = json.load(open(f"{d}/config.json"))
    assert cfg["architectures"] == ["LlamaForCausalLM"], cfg["architectures"]
    _, w = read_safetensors(f"{d}/model.safetensors")
    return cfg, {k: v.float() for k, v in w.items()}


def inv_freq(cfg):
    hs = cfg["hidden_size"] // cfg["num_attention_heads"]
    inv = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, hs, 2, dtype=torch.float32) / hs))
    s = cfg.get("rope_scaling")
    if s:
        assert s["rope_type"] == "llama3", s
        orig, lo, hi, f = s["original_max_position_embeddings"], s["low_freq_factor"], s["high_freq_factor"], s["factor"]
        wavelen = 2 * math.pi / inv
        smooth = (orig / wavelen - lo) / (hi - lo)
        scaled = torch.where(wavelen > orig / lo, inv / f, inv)
        mid = (wavelen <= orig / lo) & (wavelen >= orig / hi)
        inv = torch.where(mid, (1 - smooth) * inv / f + smooth * inv, scaled)
    return inv


def forward(cfg, w, ids):  # ids (B, T) -> logits (B, T, V)
    B, T = ids.shape
    C, NH, KV = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hs, eps = C // NH, cfg["rms_norm_eps"]
    ang = torch.outer(torch.arange(T, dtype=torch.float32), inv_freq(cfg))
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)

    def norm(x, weight):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight

    def rope(x):
        half = hs // 2
        return x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin

    x = w["model.embed_tokens.weight"][ids]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        h = norm(x, w[p + "input_layernorm.weight"])
        q = rope((h @ w[p + "self_attn.q_proj.weight"].t()).view(B, T, NH, hs).transpose(1, 2))
        k = rope((h @ w[p + "self_attn.k_proj.weight"].t()).view(B, T, KV, hs).transpose(1, 2))
        v = (h @ w[p + "self_attn.v_proj.weight"].t()).view(B, T, KV, hs).transpose(1, 2)
        k, v = k.repeat_interleave(NH // KV, dim=1), v.repeat_interleave(NH // KV, dim=1)
        att = ((q @ k.transpose(-2, -1)) / math.sqrt(hs)).masked_fill(~mask, float("-inf")).softmax(-1)
        x = x + (att @ v).transpose(1, 2).reshape(B, T, C) @ w[p + "self_attn.o_proj.weight"].t()
        h = norm(x, w[p + "post_attention_layernorm.weight"])
        gate, up = h @ w[p + "mlp.gate_proj.weight"].t(), h @ w[p + "mlp.up_proj.weight"].t()
        x = x + (F.silu(gate) * up) @ w[p + "mlp.down_proj.weight"].t()
    head = w["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else w["lm_head.weight"]
    return norm(x, w["model.norm.weight"]) @ head.t()


def main():
    cmd = sys.argv[1]
    cfg, w = load(sys.argv[2])
    if cmd == "logits":
        ids = torch.tensor([[int(i) for i in sys.argv[3].split(",")]])
        with torch.no_grad():
            np.save(sys.argv[4], forward(cfg, w, ids)[0].numpy().astype(np.float32))
    elif cmd == "rewrite":
        out = sys.argv[3]
        tensors = dict(w)
        for l in range(cfg["num_hidden_layers"]):
            tensors[f"model.layers.{l}.self_attn.rotary_emb.inv_freq"] = inv_freq(cfg)
        cfg = dict(cfg)
        cfg["rope_scaling"] = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                               "original_max_position_embeddings": 64}
        os.makedirs(out, exist_ok=True)
        write_safetensors(f"{out}/model.safetensors", tensors)
        json.dump(cfg, open(f"{out}/config.json", "w"), indent=2)
    elif cmd == "val-loss":
        T, total, n = cfg["max_position_embeddings"], 0.0, 0
        for shard in sorted(glob.glob(f"{sys.argv[3]}/val-*.h5")):
            tokens = torch.from_numpy(h5py.File(shard, "r")["tokens"][:].astype(np.int64))
            windows = (len(tokens) - T) // T
            if windows <= 0:
                continue
            win = torch.stack([tokens[i * T:i * T + T + 1] for i in range(windows)])
            with torch.no_grad():
                for b in range(0, windows, 64):
                    chunk = win[b:b + 64]
                    logits = forward(cfg, w, chunk[:, :T])
                    total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), chunk[:, 1:].reshape(-1),
                                             reduction="sum").item()
                    n += chunk[:, 1:].numel()
        print(f"{total / n:.7f}")
    else:
        raise SystemExit(f"unknown command {cmd}")


main()
