"""The decode op against the public decode pipeline, timed as
../shared/anchors.md times it, for scripts/ab-python.sh with A = ad5198e.

The pinned commit has no decode op, but the anchors timed its ``topk`` over
DeepGEMM's paged logits beside DeepGEMM + vLLM's pick. So with a package
that has ``indexer_topk_paged`` this script times that op on each row of the
anchors' decode table (B requests, next_n tokens, L keys each, block 64);
with one that lacks it (ad5198e) it times ``topk`` over the same batch's
logits ([B * next_n, L], from that package's ``indexer_scores`` over each
request's keys: row (b, j) scores positions [0, L - next_n + j + 1)). The
public pipeline's standing over ours is then, per row, the anchors'
pipeline / topk divided by this A/B's B / A.

Run (device tool): `bash scripts/ab-prepare.sh ad5198e` here, then command
"ROUNDS=3 BENCH=python/bench/bench_decode_public.py bash scripts/ab-python.sh
--reps 20", carry ["ab-base"].

Inputs as the anchors describe them: q ~ N(0, 1) in FP8, k rows ~ N(0, 1)
quantised per row (scale amax / 448), w ~ N(0, 1) / 8; each request's blocks
in a shuffled table. Each call is preceded by a 256 MB L2 flush and a ~100
us GPU sleep and timed alone with CUDA events (bench_scores_op.median_ms);
the median of --reps calls a row.

Usage: python3 python/bench/bench_decode_public.py [--rows 1x1x131072,...] [--reps 20] [--json out.json]
"""

import json
import os
import sys

import torch

if os.environ.get("PYTHONPATH") is None:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dsa_topk  # noqa: E402,F401  (registers torch.ops.dsa_topk)
from bench_scores_op import FP8, bench_args, median_ms, quantized_keys  # noqa: E402

# The anchors' decode rows, B x next_n x L.
ROWS = ("1x1x32768,1x1x131072,1x2x131072,4x1x1048576,32x1x32768,32x1x131072,32x2x131072,64x1x65536,"
        "128x1x32768,128x1x131072,128x2x131072")
H, D, BLOCK, K = 64, 128, 64, 2048


def make_batch(B, next_n, L, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(B, next_n, H, D, device="cuda", generator=g).to(FP8)
    w = torch.randn(B * next_n, H, device="cuda", generator=g) / 8
    blocks = -(-L // BLOCK)
    # A request's keys in its blocks' slots, generated a million at a time
    # (the fp32 draws of 128 x 128K keys would take 8 GB at once).
    slots = B * blocks * BLOCK
    k = torch.empty(slots, D, dtype=FP8, device="cuda")
    scale = torch.empty(slots, dtype=torch.float32, device="cuda")
    chunk = 1 << 20
    for s in range(0, slots, chunk):
        n = min(chunk, slots - s)
        k[s:s + n], scale[s:s + n] = quantized_keys(n, g)
    # Request b's blocks are cache blocks order[b * blocks : (b + 1) * blocks].
    order = torch.randperm(B * blocks, device="cuda", generator=g).to(torch.int32)
    return q, w, k, scale, order.view(B, blocks), blocks


def paged_call(B, next_n, L, seed):
    q, w, k, scale, table, blocks = make_batch(B, next_n, L, seed)
    cache = torch.empty(B * blocks, BLOCK * (D + 4), dtype=torch.uint8, device="cuda")
    # Keys are laid out by request and position, so their i-th block of
    # BLOCK slots goes to the cache block the table's i-th entry names.
    dst = table.reshape(-1).long()
    cache[dst, : BLOCK * D] = k.view(torch.uint8).view(B * blocks, BLOCK * D)
    cache[dst, BLOCK * D:] = scale.view(torch.uint8).view(B * blocks, BLOCK * 4)
    lens = torch.full((B,), L, dtype=torch.int32, device="cuda")
    op = torch.ops.dsa_topk.indexer_topk_paged
    return lambda: op(q, cache, table, lens, w, K, check_ranges=False)


def topk_call(B, next_n, L, seed):
    q, w, k, scale, table, blocks = make_batch(B, next_n, L, seed)
    logits = torch.empty(B * next_n, L, dtype=torch.float32, device="cuda")
    ks = torch.zeros(B * next_n, dtype=torch.int32, device="cuda")
    ke = (L - next_n + 1 + torch.arange(next_n, device="cuda")).repeat(B).to(torch.int32)
    span = blocks * BLOCK
    for b in range(B):
        rows = slice(b * next_n, (b + 1) * next_n)
        keys, scales = k[b * span:b * span + L], scale[b * span:b * span + L]
        logits[rows] = torch.ops.dsa_topk.indexer_scores(q[b], keys, scales, w[rows], ks[rows], ke[rows],
                                                         check_ranges=False)
    del k, scale
    op = torch.ops.dsa_topk.topk
    return lambda: op(logits, ks, ke, K, check_ranges=False)


def main():
    parser, args = bench_args(__doc__.splitlines()[0], ROWS, "comma-separated BxNEXT_NxL")
    paged = hasattr(torch.ops.dsa_topk, "indexer_topk_paged")
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    rows = []
    for spec in args.rows.split(","):
        try:
            B, next_n, L = (int(x) for x in spec.lower().split("x"))
        except ValueError:
            parser.error(f"--rows: '{spec}' is not BxNEXT_NxL")
        call = (paged_call if paged else topk_call)(B, next_n, L, args.seed)
        ms = median_ms(call, args.reps, flush)
        # ab-python.sh pairs rows by T and N: T names the batch, N the context.
        rows.append({"T": f"{B}x{next_n}", "N": L, "op_ms": ms})
        print(f"{B} x {next_n} x {L}: {'indexer_topk_paged' if paged else 'topk over the logits'} {ms:.4f} ms",
              flush=True)
        del call
        torch.cuda.empty_cache()
    print(f"package: {os.path.dirname(dsa_topk.__file__)}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "reps": args.reps, "package": dsa_topk.__file__,
                       "op": "indexer_topk_paged" if paged else "topk", "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
