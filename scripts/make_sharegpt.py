"""Generate tuner/bench/samples/sharegpt_small.json: a ShareGPT-format file made from local text only.

The real ShareGPT dump is a 650 MB download; tests and demos need the same *shape* (a JSON list of
{"id", "conversations": [{"from", "value"}, ...]}), varied prompt/answer lengths, and the awkward
entries the real file has (one-turn conversations, very short prompts, prompts too long for vLLM's
1024-token limit). Text comes from the docstrings of the Python standard library this script runs
on, read with ``ast`` (nothing is imported or downloaded). Deterministic for a given Python version.

    python scripts/make_sharegpt.py [--out tuner/bench/samples/sharegpt_small.json] [--n 400]
"""

from __future__ import annotations

import argparse
import ast
import json
import random
import sysconfig
from pathlib import Path

_QUESTIONS = [
    "What does `{name}` do?",
    "Can you explain `{name}` from the `{module}` module?",
    "I'm reading the {module} source. How should I use {name}?",
    "Explain {name} briefly.",
    "Write documentation for the function `{name}` in `{module}`.",
    "what is {name}",
    "Summarize the purpose of {module}.{name} and give an example of when I would call it.",
]
_FOLLOW_UPS = ["Thanks! Can you give an example?", "What about edge cases?", "ok", "Shorter please.",
               "How does that compare to the rest of the module?"]
_SHORT = ["hi", "ok", "thanks", "?", "yes"]


def _docstrings(limit_files: int = 400) -> list[tuple[str, str, str]]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    out: list[tuple[str, str, str]] = []
    for path in sorted(stdlib.glob("*.py"))[:limit_files]:
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        module = path.stem
        mod_doc = ast.get_docstring(tree)
        if mod_doc:
            out.append((module, module, mod_doc))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                doc = ast.get_docstring(node)
                if doc and len(doc) > 40:
                    out.append((module, node.name, doc))
    return out


def build(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    docs = _docstrings()
    long_docs = [d for d in docs if len(d[2]) > 3000]
    rng.shuffle(docs)
    conversations: list[dict] = []
    for i in range(n):
        module, name, doc = docs[i % len(docs)]
        kind = rng.random()
        turns: list[dict]
        if kind < 0.05:  # one turn only: vLLM drops these
            turns = [{"from": "human", "value": rng.choice(_QUESTIONS).format(name=name, module=module)}]
        elif kind < 0.10:  # prompt under 4 tokens: pruned
            turns = [{"from": "human", "value": rng.choice(_SHORT)}, {"from": "gpt", "value": doc}]
        elif kind < 0.15 and long_docs:  # prompt over 1024 tokens: pruned
            big = "\n\n".join(d[2] for d in rng.sample(long_docs, min(4, len(long_docs))))
            turns = [{"from": "human", "value": f"Review this text:\n\n{big}"},
                     {"from": "gpt", "value": doc[:400]}]
        else:
            question = rng.choice(_QUESTIONS).format(name=name, module=module)
            for _ in range(rng.choice([0, 0, 1, 1, 2, 3])):  # pasted context: longer prompts
                _, other, context = docs[rng.randrange(len(docs))]
                question = f"{question}\n\nHere is related documentation for {other}:\n{context}"
            answer = doc if rng.random() < 0.8 else doc[: rng.randint(20, 200)]
            if rng.random() < 0.4:  # a fuller answer
                answer += "\n\nSee also:\n" + docs[rng.randrange(len(docs))][2]
            turns = [{"from": "human", "value": question}, {"from": "gpt", "value": answer}]
            for _ in range(rng.choice([0, 0, 0, 1, 2])):
                turns.append({"from": "human", "value": rng.choice(_FOLLOW_UPS)})
                turns.append({"from": "gpt", "value": docs[rng.randrange(len(docs))][2][:600]})
        conversations.append({"id": f"stdlib_{i:04d}", "conversations": turns})
    return conversations


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent.parent
                                         / "tuner" / "bench" / "samples" / "sharegpt_small.json"))
    ap.add_argument("--n", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    data = build(a.n, a.seed)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {len(data)} conversations, {out.stat().st_size / 1e6:.2f} MB to {out}")


if __name__ == "__main__":
    main()
