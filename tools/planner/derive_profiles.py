#!/usr/bin/env python3
"""Derives the shipped hardware profiles (profiles/*.json) from measured public tables.

Usage: tools/planner/derive_profiles.py [SHARED_DATA_HARDWARE_DIR] [OUT_DIR]
  (defaults: ../shared/data/hardware relative to the repository, and profiles/)

Inputs (see profiles/PROVENANCE.md for licences and commits):
  aiconfigurator_measured/<gpu>_nccl_<ver>_nccl_perf.csv   nccl-tests, fp16, 2/4/8 GPUs (Apache-2.0)
  aiconfigurator_systems/<gpu>.yaml                         device peaks, HBM, capacity (Apache-2.0)
  vidur_nccl_profiling/<gpu>_dgx_{send_recv,all_reduce}.csv torch/NCCL, incl. 2-node runs (MIT)
  DeepEP's published low-latency table (README / docs/legacy.md, quoted in hardware.md; MIT)

Fits t = A(n) alpha + B(n) S beta by least squares on relative error, with the ring
coefficients of src/moe/planner/cost_model.h (allreduce A = 2(n-1), B = 2(n-1)/n;
reduce_scatter / allgather / alltoall A = n-1, B = (n-1)/n; p2p A = B = 1). This is an
independent implementation of the same fit as planner/calibration_fit.cc (stdlib only).
Only derived numbers (alpha, beta, device peaks) are written, never the tables.
"""
import csv
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def coeffs(prim, n):
    if prim == "allreduce":
        return 2.0 * (n - 1), 2.0 * (n - 1) / n
    if prim == "p2p":
        return 1.0, 1.0
    return float(n - 1), (n - 1) / n


def fit(prim, samples, min_bytes=4096):
    """samples: [(n, bytes, seconds)] -> (alpha, beta); weighted 1/t^2, alpha >= 0."""
    s11 = s12 = s22 = r1 = r2 = 0.0
    used = 0
    for n, b, t in samples:
        if b < min_bytes or t <= 0:
            continue
        a_c, b_c = coeffs(prim, n)
        w = 1.0 / (t * t)
        u, v = a_c, b_c * b
        s11 += w * u * u
        s12 += w * u * v
        s22 += w * v * v
        r1 += w * u * t
        r2 += w * v * t
        used += 1
    assert used >= 2, (prim, len(samples))
    det = s11 * s22 - s12 * s12
    alpha = (r1 * s22 - r2 * s12) / det
    beta = (s11 * r2 - s12 * r1) / det
    if alpha < 0:
        alpha, beta = 0.0, r2 / s22
    return alpha, beta


def nccl_samples(path, op):
    out = []
    with open(path) as f:
        for row in csv.DictReader(f):
            if row["op_name"] == op and row["nccl_dtype"] == "half":
                out.append((int(row["num_gpus"]), 2.0 * float(row["message_size"]), float(row["latency"]) * 1e-3))
    return out


def vidur_samples(path, op, workers, per_node):
    out = []
    with open(path) as f:
        for row in csv.DictReader(f):
            if int(row["num_workers"]) == workers and int(row["devices_per_node"]) == per_node:
                t = float(row["time_stats.%s.median" % op]) * 1e-3
                out.append((workers, float(row["size"]), t))
    return out


def yaml_number(path, key):
    with open(path) as f:
        for line in f:
            m = re.match(r"\s*%s:\s*([0-9.eE+]+)" % re.escape(key), line)
            if m:
                return float(m.group(1))
    raise KeyError(key)


def yaml_nccl_mem8(path):
    text = open(path).read()
    m = re.search(r"nccl_mem:.*?\n\s*8:\s*([0-9]+)", text, re.S)
    return float(m.group(1))


# DeepEP low-latency kernels (pure RDMA, H800 + CX7 400 Gb/s IB), 128 tokens, hidden 7168,
# top-8, FP8 dispatch: (EP size, dispatch microseconds) from DeepEP's published table.
DEEPEP_LL_DISPATCH = [(16, 118), (32, 155), (64, 173), (128, 192), (256, 194)]
DEEPEP_LL_BYTES = 128 * 7168 * 8 * 1.0  # bytes each rank sends (FP8, 8 copies per token)


def ab(alpha, beta):
    return {"alpha": alpha, "beta": beta}


def make(gpu, nccl_csv, yaml_file, vidur_prefix, hw, note):
    tiers = {"intra_node": {}, "inter_node": {}}
    for prim, op in (("allreduce", "all_reduce"), ("reduce_scatter", "reduce_scatter"),
                     ("allgather", "all_gather"), ("alltoall", "alltoall")):
        tiers["intra_node"][prim] = ab(*fit(prim, nccl_samples(os.path.join(hw, "aiconfigurator_measured", nccl_csv), op)))
    vdir = os.path.join(hw, "vidur_nccl_profiling")
    tiers["intra_node"]["p2p"] = ab(*fit("p2p", vidur_samples(os.path.join(vdir, vidur_prefix + "_send_recv.csv"),
                                                              "send_recv", 2, 2)))
    p2p_inter = fit("p2p", vidur_samples(os.path.join(vdir, vidur_prefix + "_send_recv.csv"), "send_recv", 2, 1))
    tiers["inter_node"]["p2p"] = ab(*p2p_inter)
    ar_inter_rows = vidur_samples(os.path.join(vdir, vidur_prefix + "_all_reduce.csv"), "all_reduce", 2, 1)
    ring = fit("allreduce", ar_inter_rows) if ar_inter_rows else p2p_inter
    for prim in ("allreduce", "reduce_scatter", "allgather"):
        tiers["inter_node"][prim] = ab(*ring)
    if gpu.startswith("a100"):
        tiers["inter_node"]["alltoall"] = ab(*p2p_inter)
    else:
        tiers["inter_node"]["alltoall"] = ab(*fit("alltoall", [(n, DEEPEP_LL_BYTES, t * 1e-6) for n, t in DEEPEP_LL_DISPATCH]))
    y = os.path.join(hw, "aiconfigurator_systems", yaml_file)
    device = {
        "peak_flops": {"bf16": yaml_number(y, "bfloat16_tc_flops")},
        "memory_bandwidth": yaml_number(y, "mem_bw"),
        "memory_capacity": yaml_number(y, "mem_capacity"),
        "compute_efficiency": 0.6,
        "memory_efficiency": yaml_number(y, "mem_bw_empirical_scaling_factor"),
        "reserved_memory": yaml_nccl_mem8(y) + yaml_number(y, "other_mem"),
    }
    try:
        device["peak_flops"]["fp8"] = yaml_number(y, "fp8_tc_flops")
    except KeyError:
        pass
    return {
        "name": gpu,
        "provenance": note + " Derived by tools/planner/derive_profiles.py; see profiles/PROVENANCE.md.",
        "devices_per_node": int(yaml_number(y, "num_gpus_per_node")),
        "device": device,
        "tiers": tiers,
    }


def main():
    hw = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "..", "shared", "data", "hardware")
    out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "profiles")
    specs = [
        ("h100_sxm_8gpu", "h100_sxm_nccl_2.27.3_nccl_perf.csv", "h100_sxm.yaml", "h100_dgx",
         "8x H100 SXM 80GB, NVLink4/NVSwitch, 1 CX7 NDR 400 Gb/s NIC per GPU. intra_node: nccl-tests fp16 2/4/8 GPUs "
         "(aiconfigurator, NCCL 2.27.3), p2p vidur h100_dgx send_recv; inter_node: p2p and ring steps from vidur "
         "h100_dgx 2-node send_recv, alltoall fitted to DeepEP's low-latency table (H800 + CX7) at EP 16..256."),
        ("h200_sxm_8gpu", "h200_sxm_nccl_2.26.2_nccl_perf.csv", "h200_sxm.yaml", "h100_dgx",
         "8x H200 SXM 141GB, NVLink4/NVSwitch, 1 CX7 NDR NIC per GPU. intra_node: nccl-tests fp16 (aiconfigurator, "
         "NCCL 2.26.2); p2p and inter_node as the H100 profile (same NVSwitch generation and NIC; no H200 2-node table)."),
        ("a100_sxm_8gpu", "a100_sxm_nccl_2.27.3_nccl_perf.csv", "a100_sxm.yaml", "a100_dgx",
         "8x A100 SXM4 80GB, NVLink3. intra_node: nccl-tests fp16 (aiconfigurator, NCCL 2.27.3), p2p vidur a100_dgx; "
         "inter_node: vidur a100_dgx 2-node all_reduce and send_recv (an Azure cluster measuring ~8 GB/s per GPU, "
         "well below HDR's 25 GB/s line rate: pessimistic), alltoall = the 2-node p2p fit."),
    ]
    os.makedirs(out, exist_ok=True)
    for name, nccl, yaml_file, vidur, note in specs:
        prof = make(name, nccl, yaml_file, vidur, hw, note)
        with open(os.path.join(out, name + ".json"), "w") as f:
            json.dump(prof, f, indent=2)
            f.write("\n")
        for tier, prims in prof["tiers"].items():
            for prim, v in prims.items():
                print("%-14s %-10s %-14s alpha %7.2f us  bandwidth %7.1f GB/s" %
                      (name, tier, prim, v["alpha"] * 1e6, 1e-9 / v["beta"]))


if __name__ == "__main__":
    main()
