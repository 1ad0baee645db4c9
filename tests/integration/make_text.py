#!/usr/bin/env python3
"""Writes English-like text of at least N characters to stdout: sentences from a small fixed
grammar, seeded, so that the text and its statistics never change (unlike the project's docs).
The language-model tests train on it where Tiny Shakespeare is absent.

    tests/integration/make_text.py N > text.txt
"""
import random
import sys

NOUNS = ("rank node batch shard model layer token gradient checkpoint step file cluster job queue "
         "kernel buffer window record epoch optimizer").split()
VERBS = "reads writes sums sends waits trains saves loads checks moves splits joins keeps drops counts".split()
ADJECTIVES = "small large first last every other newest local shared slow fast quiet busy whole".split()
ADVERBS = "again soon once twice often slowly quickly".split()


def noun_phrase(rnd):
    words = [rnd.choice(["the", "a", "each", "every", "one"])]
    if rnd.random() < 0.5:
        words.append(rnd.choice(ADJECTIVES))
    words.append(rnd.choice(NOUNS))
    return " ".join(words)


def sentence(rnd):
    s = f"{noun_phrase(rnd)} {rnd.choice(VERBS)} {noun_phrase(rnd)}"
    if rnd.random() < 0.3:
        s += " " + rnd.choice(ADVERBS)
    if rnd.random() < 0.3:
        s += f", and {noun_phrase(rnd)} {rnd.choice(VERBS)} {noun_phrase(rnd)}"
    return s[0].upper() + s[1:] + rnd.choice([".", ".", ".", "?", "!"])


def main():
    want = int(sys.argv[1])
    rnd = random.Random(1)
    parts, n = [], 0
    while n < want:
        s = sentence(rnd)
        parts.append(s)
        n += len(s) + 1
        if rnd.random() < 0.1:
            parts.append("\n")
    print(" ".join(parts))


if __name__ == "__main__":
    main()
