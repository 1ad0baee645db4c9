#!/usr/bin/env python3
"""The independent side of hf_export.sh: GPT-2 in Hugging Face's layout, read and written by
PyTorch code that shares nothing with dptrain.

  hf_reference.py logits DIR IDS OUT.npy
      reads DIR/config.json and DIR/model.safetensors (a reader of the format written here from
      its specification), builds GPT-2 from torch primitives with Hugging Face's names and Conv1D
      orientation (x @ W + b), and saves the logits of the comma-separated IDS, (n, vocab) float32
  hf_reference.py rewrite SRC OUT POSITIONS
      writes SRC's weights the way GPT2LMHeadModel's state_dict has them: names under
      "transformer.", the tied lm_head.weight, each layer's causal-mask buffer h.N.attn.bias
      (BOOL), tensors in sorted order, and a position table grown to POSITIONS rows (new rows
      random), with a config.json to match
  hf_reference.py score DIR ITEMS.jsonl OUT.json
      multiple-choice items (dptrain eval --task's two forms) scored by the summed log-probability
      of each ending given its context, a char model's ids from config.json's "dptrain" entry;
      writes each item's log-likelihoods and the accuracies (acc; acc_norm per character, as
      lm-evaluation-harness; acc_tokens per token, as llm.c)
  hf_reference.py check-layout FILE
      the file follows the format: 8-byte aligned data, tensors contiguous in header order, no
      trailing bytes
"""
import json
import math
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

SIZES = {"F32": 4, "BF16": 2, "F16": 2, "F64": 8, "BOOL": 1}


def read_safetensors(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        buf = data[b:end]
        if e["dtype"] == "F32":
            a = np.frombuffer(buf, dtype="<f4")
        elif e["dtype"] == "BF16":  # the top half of a float32
            a = (np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        elif e["dtype"] == "BOOL":
            a = np.frombuffer(buf, dtype=np.uint8).astype(bool)
        else:
            raise SystemExit(f"{path}: {name}: dtype {e['dtype']} not handled here")
        out[name] = torch.from_numpy(a.reshape(e["shape"]).copy())
    return header, out


def write_safetensors(path, tensors, dtype="F32"):
    header, blobs, at = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(tensors):
        t = tensors[name]
        if t.dtype == torch.bool:
            blob, dt = t.numpy().astype(np.uint8).tobytes(), "BOOL"
        elif dtype == "BF16":
            blob, dt = t.to(torch.bfloat16).view(torch.int16).numpy().astype("<i2").tobytes(), "BF16"
        else:
            blob, dt = t.float().numpy().astype("<f4").tobytes(), "F32"
        header[name] = {"dtype": dt, "shape": list(t.shape), "data_offsets": [at, at + len(blob)]}
        blobs.append(blob)
        at += len(blob)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def gelu_new(x):
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def gpt2_logits(cfg, P, ids):
    pre = "transformer." if "transformer.wte.weight" in P else ""
    W = lambda name: P[pre + name]
    C, NH = cfg["n_embd"], cfg["n_head"]
    T, hs = len(ids), C // NH
    idx = torch.tensor(ids)
    x = W("wte.weight")[idx] + W("wpe.weight")[:T]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for l in range(cfg["n_layer"]):
        p = f"h.{l}."
        h = F.layer_norm(x, (C,), W(p + "ln_1.weight"), W(p + "ln_1.bias"), eps=cfg["layer_norm_epsilon"])
        qkv = h @ W(p + "attn.c_attn.weight") + W(p + "attn.c_attn.bias")  # Conv1D: (in, out)
        q, k, v = (t.view(T, NH, hs).transpose(0, 1) for t in qkv.split(C, dim=-1))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(0, 1).reshape(T, C)
        x = x + y @ W(p + "attn.c_proj.weight") + W(p + "attn.c_proj.bias")
        h = F.layer_norm(x, (C,), W(p + "ln_2.weight"), W(p + "ln_2.bias"), eps=cfg["layer_norm_epsilon"])
        h = gelu_new(h @ W(p + "mlp.c_fc.weight") + W(p + "mlp.c_fc.bias"))
        x = x + h @ W(p + "mlp.c_proj.weight") + W(p + "mlp.c_proj.bias")
    x = F.layer_norm(x, (C,), W("ln_f.weight"), W("ln_f.bias"), eps=cfg["layer_norm_epsilon"])
    head = P.get("lm_head.weight", W("wte.weight"))
    return x @ head.t()


def score(d, items_path, out):
    cfg = json.load(open(d + "/config.json"))
    _, P = read_safetensors(d + "/model.safetensors")
    chars = cfg["dptrain"]["vocab"]
    ids_of = {c: i for i, c in enumerate(chars)}
    results, right = [], [0, 0, 0]
    for line in open(items_path):
        item = json.loads(line)
        hs = "ctx" in item
        ctx = item["ctx" if hs else "context"]
        ends = [(" " if hs else "") + e for e in item["endings" if hs else "choices"]]
        label = int(item["label" if hs else "answer"])
        lls = []
        for e in ends:
            ids = [ids_of[c] for c in ctx + e][-cfg["n_positions"]:]
            with torch.no_grad():
                logp = torch.log_softmax(gpt2_logits(cfg, P, ids).double(), dim=-1)
            first = len(ids) - len(e)
            lls.append(sum(logp[first - 1 + k, ids[first + k]].item() for k in range(len(e))))
        picks = [max(range(len(ends)), key=lambda i: lls[i]),
                 max(range(len(ends)), key=lambda i: lls[i] / len(ends[i])),
                 max(range(len(ends)), key=lambda i: lls[i] / len(ends[i]))]  # a char model: a token a character
        right = [r + (p == label) for r, p in zip(right, picks)]
        results.append(lls)
    n = len(results)
    json.dump({"loglikelihood": results, "acc": right[0] / n, "acc_norm": right[1] / n, "acc_tokens": right[2] / n},
              open(out, "w"))


def main():
    cmd = sys.argv[1]
    torch.set_num_threads(1)
    if cmd == "logits":
        d, ids, out = sys.argv[2], [int(i) for i in sys.argv[3].split(",")], sys.argv[4]
        cfg = json.load(open(d + "/config.json"))
        _, P = read_safetensors(d + "/model.safetensors")
        with torch.no_grad():
            np.save(out, gpt2_logits(cfg, P, ids).numpy().astype(np.float32))
    elif cmd == "rewrite":
        src, dst, positions = sys.argv[2], sys.argv[3], int(sys.argv[4])
        cfg = json.load(open(src + "/config.json"))
        _, P = read_safetensors(src + "/model.safetensors")
        g = torch.Generator().manual_seed(7)
        wpe = P["wpe.weight"]
        extra = torch.randn(positions - wpe.shape[0], wpe.shape[1], generator=g) * 0.02
        P["wpe.weight"] = torch.cat([wpe, extra])
        state = {"transformer." + k: v for k, v in P.items()}
        state["lm_head.weight"] = P["wte.weight"]
        for l in range(cfg["n_layer"]):
            state[f"transformer.h.{l}.attn.bias"] = torch.tril(torch.ones(positions, positions, dtype=torch.bool)).view(
                1, 1, positions, positions)
        cfg = {k: v for k, v in cfg.items() if k != "dptrain"}
        cfg["n_positions"] = cfg["n_ctx"] = positions
        json.dump(cfg, open(dst + "/config.json", "w"), indent=2)
        write_safetensors(dst + "/model.safetensors", state)
    elif cmd == "score":
        score(sys.argv[2], sys.argv[3], sys.argv[4])
    elif cmd == "check-layout":
        raw = open(sys.argv[2], "rb").read()
        (n,) = struct.unpack("<Q", raw[:8])
        header = json.loads(raw[8:8 + n])
        assert (8 + n) % 8 == 0, "data section not 8-byte aligned"
        at = 0
        for name, e in header.items():
            if name == "__metadata__":
                assert all(isinstance(v, str) for v in e.values()), "metadata values must be strings"
                continue
            b, end = e["data_offsets"]
            assert b == at, f"{name}: starts at {b}, expected {at}"
            assert end - b == SIZES[e["dtype"]] * int(np.prod(e["shape"], dtype=np.int64)), f"{name}: size"
            at = end
        assert 8 + n + at == len(raw), f"{len(raw) - 8 - n - at} trailing bytes"
        print(f"{sys.argv[2]}: {len(header) - 1} tensors, layout as specified")
    else:
        raise SystemExit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
