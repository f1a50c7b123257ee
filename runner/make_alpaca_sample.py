"""Generate runner/data/alpaca_sample.jsonl: a small Alpaca-format set written by the project
itself from templates (arithmetic, string and unit tasks) — no text copied from any dataset.

    python -m tierlab.runner.make_alpaca_sample [OUT] [--n 240] [--seed 7]
"""
from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

WORDS = ["tier", "buffer", "swap", "kernel", "gradient", "stream", "queue", "vector", "matrix",
         "packet", "socket", "cache", "ledger", "harbor", "lantern", "meadow", "copper", "falcon"]


def _add(r):
    a, b = r.randint(2, 999), r.randint(2, 999)
    return "Add the two numbers.", f"{a} and {b}", f"{a} + {b} = {a + b}."


def _mul(r):
    a, b = r.randint(2, 99), r.randint(2, 99)
    return "Multiply the two numbers.", f"{a} x {b}", f"The product is {a * b}."


def _reverse(r):
    w = r.choice(WORDS)
    return "Write the word backwards.", w, w[::-1]


def _sort(r):
    xs = r.sample(range(1, 100), r.randint(4, 8))
    return ("Sort these numbers from smallest to largest.", ", ".join(map(str, xs)),
            ", ".join(map(str, sorted(xs))))


def _celsius(r):
    c = r.randint(-30, 45)
    return "Convert the temperature from Celsius to Fahrenheit.", f"{c} C", f"{c * 9 / 5 + 32:.1f} F"


def _bytes(r):
    gib = r.randint(1, 512)
    return ("How many bytes are in this many gibibytes?", f"{gib} GiB",
            f"{gib} GiB = {gib * 2**30:,} bytes.")


def _count(r):
    words = r.sample(WORDS, r.randint(3, 7))
    return "Count the words in the sentence.", " ".join(words), f"There are {len(words)} words."


def _vowels(r):
    w = r.choice(WORDS)
    n = sum(ch in "aeiou" for ch in w)
    return "How many vowels does the word contain?", w, f"'{w}' has {n} vowels."


def _list(r):
    k = r.randint(2, 5)
    picks = r.sample(WORDS, k)
    return (f"Name {k} words from the project's word list, one per line.", "",
            "\n".join(picks))


TASKS = [_add, _mul, _reverse, _sort, _celsius, _bytes, _count, _vowels, _list]


def generate(n: int = 240, seed: int = 7) -> list[dict]:
    r = random.Random(seed)
    out = []
    for i in range(n):
        instruction, inp, output = TASKS[i % len(TASKS)](r)
        out.append({"instruction": instruction, "input": inp, "output": output})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("out", nargs="?", default=str(Path(__file__).parent / "data" / "alpaca_sample.jsonl"))
    ap.add_argument("--n", type=int, default=240)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    with open(a.out, "w") as f:
        for rec in generate(a.n, a.seed):
            f.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
