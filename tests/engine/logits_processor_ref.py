"""Independent reference for tests/engine/logits_processor_test.cc: vLLM v1's logits
processing in torch (sampler.py's order; ops/penalties.py, ops/topk_topp_sampler.py
formulas): logit_bias, repetition / frequency / presence penalties, then temperature,
min_p, top_k, top_p. Reads {"cases":[...]} on stdin, writes one JSON object per case:
  processed - logits after bias and penalties
  logprobs  - log_softmax of the raw logits
  kept      - token ids that survive temperature + min_p + top_k + top_p
  probs     - their renormalised probabilities (same order)
"""
import json
import sys

import torch


def process(c):
    raw = torch.tensor(c["logits"], dtype=torch.float64)
    vocab = raw.numel()
    logits = raw.clone()
    for tok, bias in c["bias"]:
        logits[tok] += bias
    prompt_mask = torch.zeros(vocab, dtype=torch.bool)
    prompt_mask[torch.tensor(c["prompt"], dtype=torch.long)] = True
    counts = torch.zeros(vocab, dtype=torch.float64)
    for tok in c["output"]:
        counts[tok] += 1
    output_mask = counts > 0
    rep = torch.where(prompt_mask | output_mask, torch.tensor(c["repetition"], dtype=torch.float64), torch.tensor(1.0, dtype=torch.float64))
    logits = torch.where(logits > 0, logits / rep, logits * rep)
    logits = logits - c["frequency"] * counts
    logits = logits - c["presence"] * output_mask.to(torch.float64)
    out = {"processed": logits.tolist(), "logprobs": torch.log_softmax(raw, dim=-1).tolist()}

    t = logits / c["temperature"]
    probs = torch.softmax(t, dim=-1)
    keep = probs >= c["min_p"] * probs.max()
    t = t.masked_fill(~keep, float("-inf"))
    if 0 < c["top_k"] < vocab:
        kth = torch.topk(t, c["top_k"]).values[-1]
        t = t.masked_fill(t < kth, float("-inf"))
    if c["top_p"] < 1:
        sorted_t, idx = torch.sort(t, descending=False)
        cum = torch.softmax(sorted_t, dim=-1).cumsum(dim=-1)
        drop = cum <= 1 - c["top_p"]
        drop[-1] = False
        t = t.masked_fill(torch.zeros(vocab, dtype=torch.bool).scatter(0, idx, drop), float("-inf"))
    p = torch.softmax(t, dim=-1)
    kept = [i for i in range(vocab) if p[i] > 0]
    out["kept"] = kept
    out["probs"] = [p[i].item() for i in kept]
    return out


def main():
    cases = json.load(sys.stdin)["cases"]
    json.dump([process(c) for c in cases], sys.stdout)


if __name__ == "__main__":
    main()
