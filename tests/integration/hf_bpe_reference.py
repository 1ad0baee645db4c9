#!/usr/bin/env python3
"""The independent side of bpe_tokenizer.sh: a byte-level BPE as Hugging Face's tokenizer.json
describes it, trained and applied by Python code that shares nothing with dptrain (the `regex`
module for the pre-tokenizer's Unicode classes).

  hf_bpe_reference.py make TEXT OUT.json MERGES FORM
      learns MERGES merges on TEXT (the most frequent adjacent pair of each round, over the
      pre-tokenizer's pieces) and writes a tokenizer.json. FORM llama3: Llama 3's pattern in a
      Sequence of Split and ByteLevel, merges as pairs, ignore_merges true, special tokens
      <|begin_of_text|> and <|end_of_text|> after the vocabulary, and two whole words in the
      vocabulary that no merge makes (what ignore_merges is for). FORM gpt2: a ByteLevel
      pre-tokenizer with GPT-2's own regex, merges as "a b" strings, <|endoftext|> in the vocabulary.
  hf_bpe_reference.py encode TOKENIZER.json TEXT OUT.ids
      TEXT's ids (uint32): special tokens split out first (leftmost, longest), the pieces between
      them by the pattern, each piece's bytes in GPT-2's byte-to-unicode form, a piece that is a
      token taken whole where ignore_merges says so, else merged lowest rank first; then the ids a
      TemplateProcessing post_processor puts before and after the sequence
"""
import collections
import json
import sys

import numpy as np
import regex

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
          r"|\s+(?!\S)|\s+")
GPT2 = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def byte_table():  # GPT-2's: printable bytes as themselves, the rest from 256 on
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    out, extra = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return out


BYTES = byte_table()


def printable(piece):
    return "".join(BYTES[b] for b in piece.encode("utf-8"))


def merged(w, a, b):  # w with every adjacent (a, b), left to right, made one symbol
    nw, i = [], 0
    while i < len(w):
        if i + 1 < len(w) and w[i] == a and w[i + 1] == b:
            nw.append(a + b)
            i += 2
        else:
            nw.append(w[i])
            i += 1
    return nw


def make(text_path, out, n_merges, form):
    text = open(text_path, encoding="utf-8").read()
    pattern = LLAMA3 if form == "llama3" else GPT2
    words = collections.Counter(tuple(printable(p)) for p in regex.findall(pattern, text))
    vocab = [BYTES[b] for b in range(256)]
    merges = []
    for _ in range(n_merges):
        pairs = collections.Counter()
        for w, c in words.items():
            for a, b in zip(w, w[1:]):
                pairs[a, b] += c
        if not pairs:
            break
        (a, b), _ = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        merges.append((a, b))
        vocab.append(a + b)
        after = collections.Counter()
        for w, c in words.items():
            after[tuple(merged(w, a, b))] += c
        words = after
    if form == "llama3":
        # Whole words no merge makes: ignore_merges takes them as they are, merging would not.
        vocab += [w for w in (printable(" qwertyuiop"), printable("Straße")) if w not in vocab]
        specials = [{"id": len(vocab) + i, "content": s, "special": True}
                    for i, s in enumerate(["<|begin_of_text|>", "<|end_of_text|>"])]
        pre = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": LLAMA3}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
        merge_list, ignore = [[a, b] for a, b in merges], True
    else:
        vocab.append("<|endoftext|>")
        specials = [{"id": len(vocab) - 1, "content": "<|endoftext|>", "special": True}]
        pre = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
        merge_list, ignore = [f"{a} {b}" for a, b in merges], False
    tok = {"version": "1.0", "added_tokens": specials, "normalizer": None, "pre_tokenizer": pre,
           "post_processor": None, "decoder": {"type": "ByteLevel"},
           "model": {"type": "BPE", "dropout": None, "unk_token": None, "byte_fallback": False,
                     "ignore_merges": ignore, "vocab": {t: i for i, t in enumerate(vocab)}, "merges": merge_list}}
    json.dump(tok, open(out, "w"), ensure_ascii=False)


def pattern_of(tok):
    pre = tok["pre_tokenizer"]
    if pre["type"] == "ByteLevel":
        return GPT2
    return pre["pretokenizers"][0]["pattern"]["Regex"]


def around(post, before, after):  # a post_processor's ids before and after a sequence $A
    if post is None or post["type"] == "ByteLevel":
        return
    if post["type"] == "Sequence":
        for step in post["processors"]:
            around(step, before, after)
        return
    assert post["type"] == "TemplateProcessing", post["type"]
    seen = False
    for piece in post["single"]:
        if "Sequence" in piece:
            seen = True
        else:
            (after if seen else before).extend(post["special_tokens"][piece["SpecialToken"]["id"]]["ids"])


def encode(tok_path, text_path, out):
    tok = json.load(open(tok_path, encoding="utf-8"))
    model = tok["model"]
    vocab = model["vocab"]
    ranks = {}
    for r, m in enumerate(model["merges"]):
        a, b = m.split(" ") if isinstance(m, str) else m
        ranks[a, b] = r
    specials = sorted(((t["content"], t["id"]) for t in tok.get("added_tokens", [])), key=lambda s: -len(s[0]))
    pattern = regex.compile(pattern_of(tok))
    ignore = model.get("ignore_merges", False)
    cache = {}

    def bpe(piece):
        word = printable(piece)
        if ignore and word in vocab:
            return [vocab[word]]
        if word in cache:
            return cache[word]
        w = list(word)
        while len(w) > 1:
            best = min(((ranks.get((a, b), 1 << 60), a, b) for a, b in zip(w, w[1:])))
            if best[0] == 1 << 60:
                break
            w = merged(w, best[1], best[2])
        cache[word] = [vocab[s] for s in w]
        return cache[word]

    text = open(text_path, encoding="utf-8", newline="").read()
    ids, at = [], 0
    while at < len(text):
        hits = [(text.find(s, at), -len(s), s, i) for s, i in specials if text.find(s, at) >= 0]
        end = min(hits)[0] if hits else len(text)
        for piece in pattern.findall(text[at:end]):
            ids += bpe(piece)
        if not hits:
            break
        _, neg, _, sid = min(hits)
        ids.append(sid)
        at = end - neg
    before, after = [], []
    around(tok.get("post_processor"), before, after)
    np.array(before + ids + after, dtype=np.uint32).tofile(out)


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
    elif sys.argv[1] == "encode":
        encode(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        raise SystemExit(f"unknown command {sys.argv[1]}")
