#!/usr/bin/env python3
"""The at-scale predictions of docs/planner.md: runs `moe plan --json` for each scenario and
prints, per scenario, the planner's first choice and the best strategy of each kind
(pure EP with DP attention, EP under attention TP, hybrid AR+A2A, hybrid fused, pure TP).

Usage: tools/planner/at_scale.py [MOE_BINARY] [MODEL_CONFIG_DIR]
  (defaults: build/moe, ../shared/data/model_configs)
"""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MOE = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "moe")
CFG = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "..", "shared", "data", "model_configs")

SCENARIOS = [
    # (title, config, profile, nodes, extra flags)
    ("DeepSeek-V3, 16x8 H100, batch 1024, 1000/1000", "deepseek-v3.json", "h100_sxm_8gpu", 16,
     "--batch 1024 --input-len 1000 --output-len 1000"),
    ("DeepSeek-V3, 16x8 H100, batch 1024, 1000/1000, skew 2.9", "deepseek-v3.json", "h100_sxm_8gpu", 16,
     "--batch 1024 --input-len 1000 --output-len 1000 --a2a-skew 2.9"),
    ("DeepSeek-R1, 4x8 H100, batch 64, 1000/250", "deepseek-r1.json", "h100_sxm_8gpu", 4,
     "--batch 64 --input-len 1000 --output-len 250"),
    ("DeepSeek-R1, 2x8 H100, batch 64, 1000/250", "deepseek-r1.json", "h100_sxm_8gpu", 2,
     "--batch 64 --input-len 1000 --output-len 250"),
    ("DeepSeek-R1, 4x8 A100, batch 64, 1000/250", "deepseek-r1.json", "a100_sxm_8gpu", 4,
     "--batch 64 --input-len 1000 --output-len 250"),
    ("Qwen3-235B, 4x8 H100, batch 64, 1000/250", "qwen3-235b-a22b.json", "h100_sxm_8gpu", 4,
     "--batch 64 --input-len 1000 --output-len 250"),
    ("Qwen3-235B, 2x8 H100, batch 64, 1000/250", "qwen3-235b-a22b.json", "h100_sxm_8gpu", 2,
     "--batch 64 --input-len 1000 --output-len 250"),
    ("Mixtral-8x22B, 2x8 H100, batch 64, 1000/250", "mixtral-8x22b.json", "h100_sxm_8gpu", 2,
     "--batch 64 --input-len 1000 --output-len 250"),
    ("Mixtral-8x22B, 1x8 H100, batch 64, 1000/250", "mixtral-8x22b.json", "h100_sxm_8gpu", 1,
     "--batch 64 --input-len 1000 --output-len 250"),
]


def kind(s):
    st = s["strategy"]
    if st["moe"] == "tp":
        return "pure TP"
    if st["moe"] == "ep":
        return "EP, DP attention" if st["attention_tp"] == 1 else "EP, attention TP"
    return "hybrid fused" if st["fused"] else "hybrid AR+A2A"


def main():
    for title, cfg, prof, nodes, extra in SCENARIOS:
        cmd = [MOE, "plan", "--model", os.path.join(CFG, cfg), "--profile", os.path.join(ROOT, "profiles", prof + ".json"),
               "--nodes", str(nodes), "--json"] + extra.split()
        p = subprocess.run(cmd, capture_output=True, text=True)
        print("### " + title)
        print("`" + " ".join(["moe"] + cmd[1:]).replace(ROOT + "/", "").replace(CFG + "/", "") + "`\n")
        if p.returncode != 0:
            print("error: " + p.stderr.strip() + "\n")
            continue
        j = json.loads(p.stdout)
        print("| | strategy | TTFT ms | TPOT ms | tok/s | decode compute / intra / inter ms | mem GB |")
        print("|---|---|---|---|---|---|---|")
        seen = {}
        for i, s in enumerate(j["feasible"]):
            k = kind(s)
            if i == 0 or k not in seen:
                seen.setdefault(k, s)
                d = s["decode"]
                tag = "**first**" if i == 0 else k
                print("| %s | %s | %.0f | %.1f | %.0f | %.1f / %.1f / %.1f | %.1f |" % (
                    tag, s["strategy"]["label"].replace("|", "\\|"), s["ttft_ms"], s["tpot_ms"], s["throughput_tok_s"],
                    d["compute_ms"], d["intra_node_comm_ms"], d["inter_node_comm_ms"], s["memory_gb"]["total"]))
        tp = [s for s in j["infeasible"] if s["strategy"]["moe"] == "tp"]
        for s in tp:
            print("| pure TP (infeasible) | %s | %s | | | | |" % (s["strategy"]["label"].replace("|", "\\|"),
                                                                 s["reason"].replace("|", "\\|")))
        print()


if __name__ == "__main__":
    main()
