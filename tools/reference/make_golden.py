"""Write golden data for engine tests with the independent PyTorch reference (mixtral_ref.py).

  tests/data/golden/tiny-mixtral/<case>.json + <case>.logits.f32 + index.json
      shipped model models/tiny-mixtral-shakespeare (falls back to
      /work/shared/models/tiny-mixtral-shakespeare when the repo copy is absent; the
      weights are identical, golden files don't record the path they were read from).
  tests/data/golden/random-mixtral-sharded/<case>.json + .logits.f32 + index.json
      tests/data/models/random-mixtral-sharded (made by make_test_checkpoint.py if missing).
  tests/data/golden/random-qwen2-moe/, tests/data/golden/random-qwen3-moe/
      tests/data/models/random-qwen{2,3}-moe (made by make_qwen_test_checkpoints.py if
      missing), computed with qwen_moe_ref.py.
  tests/data/golden/tiny-deepseek-v3/ (models/tiny-deepseek-v3-shakespeare: the tiny
      prompts plus a 600-character held-out prompt) and
  tests/data/golden/random-deepseek-{v2-lite,v2-grouped,v3-fp8}/, random-kimi-k2/
      (tests/data/models/..., made by make_deepseek_test_checkpoints.py if missing; the
      Qwen token-id prompts), computed with deepseek_ref.py (--only ds-tiny, ds-v2-lite,
      ds-v2-grouped, ds-kimi-k2, ds-v3-fp8; "deepseek" = all five).

Per case json:
  prompt             text (null when the case is given as token ids)
  prompt_token_ids   with BOS (id 1) first
  greedy_token_ids   N_GREEDY argmax continuations (full recompute each step; stops early
                     only on EOS, then stopped_at_eos is true)
  greedy_text        sentencepiece decode of greedy_token_ids
  logits_file        raw float32 little-endian logits [vocab] of the LAST prompt position
  logits_max_abs, logits_range (max - min) of those logits
  plus informational fields: logits_top5_ids, greedy_min_margin (smallest top1-top2 logit
  gap over the greedy steps; tiny margins mean argmax may legitimately flip at lower
  precision), greedy_margins (that gap per step: compare greedy ids only up to the first
  step whose margin is below your tolerance), prompt_topk_experts[layer][token] (router top-k expert ids, descending weight).
  Qwen sets (not every layer is sparse): moe_layers lists the sparse layer indices, and
  prompt_topk_experts / prompt_topk_weights are objects keyed by the layer index as a
  decimal string ("0", "2", ...; sparse layers only), each [token][k], descending weight;
  the weights are the ones the experts are scaled by (after norm_topk_prob), rounded to 1e-6.

Also prints (does not store) the tiny model's mean NLL over the first 256 tokens
(BOS + 255 text tokens) of the held-out text at char offset 1059636: expect ~3.5-4.3
nats/token; a broken implementation gives ~7.6.
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
import sentencepiece as spm
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import mixtral_ref  # noqa: E402
import make_test_checkpoint  # noqa: E402
import make_qwen_test_checkpoints  # noqa: E402
import qwen_moe_ref  # noqa: E402
import deepseek_ref  # noqa: E402
import make_deepseek_test_checkpoints  # noqa: E402

REPO = make_test_checkpoint.REPO
GOLDEN = os.path.join(REPO, "tests", "data", "golden")
RANDOM_DIR = make_test_checkpoint.DEFAULT_OUT
SHAKESPEARE = "/work/shared/data/tinyshakespeare.txt"
HELDOUT_OFFSET = 1059636
N_GREEDY = 32
BOS = 1

TINY_PROMPTS = [
    ("romeo", "ROMEO:"),
    ("first_citizen", "First Citizen:\nBefore we proceed any further, hear me speak."),
    ("to_be", "To be, or not to be"),
    ("king_henry", "KING HENRY IV:\nSo shaken as we are, so wan with care,"),
    ("single_char", "A"),
    ("juliet_long", "JULIET:\nO Romeo, Romeo! wherefore art thou Romeo?\n"
                    "Deny thy father and refuse thy name;\n"
                    "Or, if thou wilt not, be but sworn my love,\n"
                    "And I'll no longer be a Capulet.\n\n"
                    "ROMEO:\n[Aside] Shall I hear more, or shall I speak at this?\n\n"
                    "JULIET:\n"),
]


TINY_DEEPSEEK_DIR = os.path.join(REPO, "models", "tiny-deepseek-v3-shakespeare")


def tiny_deepseek_prompts():
    """The tiny prompts plus the first 600 characters of the held-out text (> 64 tokens)."""
    text = open(SHAKESPEARE, encoding="utf-8").read()[HELDOUT_OFFSET:HELDOUT_OFFSET + 600]
    return TINY_PROMPTS + [("heldout_600", text)]


def random_prompts():
    g = np.random.default_rng(7)
    long_ids = [BOS] + [int(x) for x in g.integers(3, 2048, size=39)]
    return [
        ("ids_5", [1, 50, 300, 1000, 7]),
        ("bos_only", [1]),
        ("ids_40", long_ids),
    ]


def qwen_prompts():
    g = np.random.default_rng(11)
    long_ids = [BOS] + [int(x) for x in g.integers(3, 2048, size=63)]
    return [
        ("ids_5", [1, 50, 300, 1000, 7]),
        ("bos_only", [1]),
        ("ids_64", long_ids),
    ]


def run_case(model, out_dir, name, prompt, ids, sp):
    logits = model.forward(ids)
    if isinstance(model.last_topk, dict):  # qwen: sparse layers only, keyed by layer index
        topk = {str(l): t.tolist() for l, t in sorted(model.last_topk.items())}
        topw = {str(l): [[round(float(x), 6) for x in row] for row in t.tolist()]
                for l, t in sorted(model.last_topw.items())}
    else:
        topk = [t.tolist() for t in model.last_topk]  # [layer][token][k]
        topw = None
    last = logits[-1].contiguous().numpy().astype("<f4")
    greedy = []
    margins = []
    seq = list(ids)
    stopped = False
    step_logits = last
    for step in range(N_GREEDY):
        if step > 0:
            step_logits = model.forward(seq)[-1].numpy()
        order = np.argsort(-step_logits, kind="stable")
        nxt = int(order[0])
        margins.append(float(step_logits[order[0]] - step_logits[order[1]]))
        greedy.append(nxt)
        seq.append(nxt)
        if nxt in model.eos_ids:
            stopped = True
            break
    # sanity: the class's own greedy agrees
    assert greedy == model.greedy(ids, N_GREEDY), name
    logits_file = name + ".logits.f32"
    last.tofile(os.path.join(out_dir, logits_file))
    rec = {
        "prompt": prompt,
        "prompt_token_ids": list(ids),
        "greedy_token_ids": greedy,
        "greedy_text": sp.decode(greedy),
        "stopped_at_eos": stopped,
        "logits_file": logits_file,
        "logits_shape": [int(last.size)],
        "logits_max_abs": float(np.abs(last).max()),
        "logits_range": float(last.max() - last.min()),
        "logits_top5_ids": [int(i) for i in np.argsort(-last, kind="stable")[:5]],
        "greedy_min_margin": min(margins),
        "greedy_margins": [round(m, 6) for m in margins],
        "prompt_topk_experts": topk,
    }
    if topw is not None:
        rec["moe_layers"] = [int(l) for l in topk]
        rec["prompt_topk_weights"] = topw
    with open(os.path.join(out_dir, name + ".json"), "w") as f:
        f.write(dumps_flat(rec))
    return rec


def dumps_flat(d):
    """One top-level key per line, values compact (keeps long id lists readable)."""
    items = ['  %s: %s' % (json.dumps(k), json.dumps(v, separators=(",", ":"), ensure_ascii=False))
             for k, v in d.items()]
    return "{\n" + ",\n".join(items) + "\n}\n"


MIXTRAL_GENERATOR = "tools/reference/make_golden.py (float32 PyTorch reference of HF Mixtral 4.46)"
QWEN_GENERATOR = ("tools/reference/make_golden.py (float32 PyTorch reference qwen_moe_ref.py of HF "
                  "Qwen2-MoE / Qwen3-MoE)")
DEEPSEEK_GENERATOR = ("tools/reference/make_golden.py (float32 PyTorch reference deepseek_ref.py of "
                      "DeepSeek-V2/V3 / Kimi-K2)")
# --only key -> (golden dir, model dir relative to the repo, make_deepseek_test_checkpoints key)
DEEPSEEK_SETS = {
    "ds-tiny": ("tiny-deepseek-v3", "models/tiny-deepseek-v3-shakespeare", None),
    "ds-v2-lite": ("random-deepseek-v2-lite", "tests/data/models/random-deepseek-v2-lite", "v2-lite"),
    "ds-v2-grouped": ("random-deepseek-v2-grouped", "tests/data/models/random-deepseek-v2-grouped", "v2-grouped"),
    "ds-kimi-k2": ("random-kimi-k2", "tests/data/models/random-kimi-k2", "kimi-k2"),
    "ds-v3-fp8": ("random-deepseek-v3-fp8", "tests/data/models/random-deepseek-v3-fp8", "v3-fp8"),
}


def write_index(out_dir, model_rel, cases, generator=MIXTRAL_GENERATOR, extra=None):
    idx = {
        "model_dir": model_rel,
        "generator": generator,
        "n_greedy": N_GREEDY,
        "bos_prepended": True,
        "logits": "float32 little-endian, last prompt position, [vocab_size]",
        "cases": [{"name": n, "json": n + ".json", "logits_file": r["logits_file"],
                   "n_prompt_tokens": len(r["prompt_token_ids"])} for n, r in cases],
    }
    idx.update(extra or {})
    with open(os.path.join(out_dir, "index.json"), "w") as f:
        json.dump(idx, f, indent=1)
        f.write("\n")


def heldout_nll(model, sp, n_tokens=256):
    text = open(SHAKESPEARE, encoding="utf-8").read()[HELDOUT_OFFSET:]
    ids = sp.encode(text[:20000])
    seq = [BOS] + ids[: n_tokens - 1]
    logits = model.forward(seq)
    return float(torch.nn.functional.cross_entropy(logits[:-1], torch.tensor(seq[1:])).item())


def main():
    ap = argparse.ArgumentParser(description="write golden data with the PyTorch reference")
    ap.add_argument("--only", choices=["tiny", "random", "qwen2", "qwen3", "deepseek"] + sorted(DEEPSEEK_SETS),
                    default=None)
    a = ap.parse_args()

    if a.only in (None, "tiny"):
        tiny_dir = make_test_checkpoint.tiny_model_dir()
        print("tiny model:", tiny_dir)
        sp = spm.SentencePieceProcessor(model_file=os.path.join(tiny_dir, "tokenizer.model"))
        model = mixtral_ref.load_model(tiny_dir)
        nll = heldout_nll(model, sp)
        print("held-out mean NLL (BOS + first 255 tokens at char %d): %.4f nats/token "
              "(expect ~3.5-4.3; broken math gives ~7.6)" % (HELDOUT_OFFSET, nll))
        if not 3.0 < nll < 4.5:
            sys.exit("NLL %.3f out of the expected range: reference math is wrong" % nll)
        out = os.path.join(GOLDEN, "tiny-mixtral")
        os.makedirs(out, exist_ok=True)
        cases = []
        for name, prompt in TINY_PROMPTS:
            ids = [BOS] + sp.encode(prompt)
            r = run_case(model, out, name, prompt, ids, sp)
            cases.append((name, r))
            print("  %-14s %3d prompt tokens, margin %.3f, greedy: %r"
                  % (name, len(ids), r["greedy_min_margin"], r["greedy_text"]))
        write_index(out, "models/tiny-mixtral-shakespeare", cases)

    if a.only in (None, "random"):
        if not os.path.exists(os.path.join(RANDOM_DIR, "model.safetensors.index.json")):
            subprocess.check_call([sys.executable, os.path.join(HERE, "make_test_checkpoint.py")])
        sp = spm.SentencePieceProcessor(model_file=os.path.join(RANDOM_DIR, "tokenizer.model"))
        model = mixtral_ref.load_model(RANDOM_DIR)
        out = os.path.join(GOLDEN, "random-mixtral-sharded")
        os.makedirs(out, exist_ok=True)
        cases = []
        for name, ids in random_prompts():
            r = run_case(model, out, name, None, ids, sp)
            cases.append((name, r))
            print("  %-14s %3d prompt tokens, margin %.3f, greedy ids: %s"
                  % (name, len(ids), r["greedy_min_margin"], r["greedy_token_ids"]))
        write_index(out, "tests/data/models/random-mixtral-sharded", cases)

    for key in ("qwen2", "qwen3"):
        if a.only not in (None, key):
            continue
        name = make_qwen_test_checkpoints.MODELS[key][0]
        model_dir = os.path.join(make_qwen_test_checkpoints.MODELS_DIR, name)
        if not os.path.exists(os.path.join(model_dir, "model.safetensors")):
            subprocess.check_call([sys.executable, os.path.join(HERE, "make_qwen_test_checkpoints.py"),
                                   "--only", key])
        sp = spm.SentencePieceProcessor(model_file=os.path.join(model_dir, "tokenizer.model"))
        model = qwen_moe_ref.load_model(model_dir)
        out = os.path.join(GOLDEN, name)
        os.makedirs(out, exist_ok=True)
        cases = []
        for cname, ids in qwen_prompts():
            r = run_case(model, out, cname, None, ids, sp)
            cases.append((cname, r))
            print("  %-14s %3d prompt tokens, margin %.3f, greedy ids: %s"
                  % (cname, len(ids), r["greedy_min_margin"], r["greedy_token_ids"]))
        write_index(out, "tests/data/models/" + name, cases, QWEN_GENERATOR,
                    {"model_type": model.family, "moe_layers": model.moe_layers})

    for key, (gname, model_rel, ckpt_key) in DEEPSEEK_SETS.items():
        if a.only not in (None, "deepseek", key):
            continue
        model_dir = os.path.join(REPO, model_rel)
        if ckpt_key and not os.path.exists(os.path.join(model_dir, "model.safetensors")):
            subprocess.check_call([sys.executable, os.path.join(HERE, "make_deepseek_test_checkpoints.py"),
                                   "--only", ckpt_key])
        sp = spm.SentencePieceProcessor(model_file=os.path.join(model_dir, "tokenizer.model"))
        model = deepseek_ref.load_model(model_dir)
        out = os.path.join(GOLDEN, gname)
        os.makedirs(out, exist_ok=True)
        cases = []
        if ckpt_key is None:
            nll = heldout_nll(model, sp)
            print("tiny-deepseek-v3 held-out mean NLL (BOS + first 255 tokens): %.4f (expect ~3.5-4.3; "
                  "broken math gives ~7.6)" % nll)
            if not 3.0 < nll < 4.5:
                sys.exit("NLL %.3f out of the expected range: reference math is wrong" % nll)
            prompts = [(n, p, [BOS] + sp.encode(p)) for n, p in tiny_deepseek_prompts()]
        else:
            prompts = [(n, None, ids) for n, ids in qwen_prompts()]
        for cname, prompt, ids in prompts:
            r = run_case(model, out, cname, prompt, ids, sp)
            cases.append((cname, r))
            print("  %-14s %3d prompt tokens, margin %.4f, greedy: %r"
                  % (cname, len(ids), r["greedy_min_margin"],
                     r["greedy_text"] if prompt else r["greedy_token_ids"]))
        write_index(out, model_rel, cases, DEEPSEEK_GENERATOR,
                    {"model_type": model.family, "moe_layers": model.moe_layers})


if __name__ == "__main__":
    main()
