"""Context parallelism for the prefill indexer (issue 37), through the
functions of python/examples/context_parallel.py, so the flow is the one the
example runs: the keys split into P contiguous slices, indexer_topk on each
with the rows' ranges cut to it and global indices, the lists merged by
merge_topk, against the single indexer_topk call over all keys. In
deterministic mode bit-identical indices and values; with the default ties
the same sorted scores, and (since scores alone do not see the index
mapping) distinct in-range indices each carrying its own score. On two GPUs
also the example itself under torchrun, one process per GPU over NCCL."""

import os
import subprocess
import sys

import pytest
import torch

import dsa_topk
from problems import bits, check_selection_shape, make_values

EXAMPLES = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "examples"))
sys.path.insert(0, EXAMPLES)
import context_parallel as cp  # noqa: E402

T, N, H = 512, 65536, 64

CASES = ([(P, dist, layout, K, N) for P in (2, 3, 4)
          for dist, layout in [("model-like", "causal"), ("ties", "causal"), ("model-like", "ragged"),
                               ("ties", "ragged")]
          for K in (2048, 512)]
         + [(4, "model-like", "causal", 2048, 4 * N)])


def test_slices_cover_each_row_once():
    """The slices tile [0, N) from aligned starts, and each row's pieces,
    shifted back, tile its own [ks, ke)."""
    for P, keys in [(2, N), (3, N), (4, 4 * N), (3, 1000), (5, 20)]:
        bounds = cp.slice_bounds(keys, P)
        assert bounds[0][0] == 0 and bounds[-1][1] == keys and len(bounds) == P
        assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
        assert all(start % cp.KEY_ALIGN == 0 and start <= end for start, end in bounds)
        ks, ke = cp.make_ranges("ragged", 100, keys, seed=P, device="cpu")
        covered = torch.zeros_like(ks)
        for start, end in bounds:
            lo, hi = cp.slice_ranges(ks, ke, start, end)
            assert bool(((lo >= 0) & (lo <= hi) & (hi <= end - start)).all())
            # A non-empty piece lies where the row and the slice meet.
            inside = hi > lo
            assert bool((lo[inside] + start == ks[inside].clamp(min=start)).all())
            assert bool((hi[inside] + start == ke[inside].clamp(max=end)).all())
            covered += hi - lo
        assert torch.equal(covered, ke - ks)


@pytest.mark.parametrize("deterministic", [True, False])
@pytest.mark.parametrize("P,dist,layout,K,keys", CASES)
def test_slices_merged_equal_the_single_call(P, dist, layout, K, keys, deterministic):
    q, k, k_scale, w = make_values(dist, T, keys, H, seed=P)
    ks, ke = cp.make_ranges(layout, T, keys, seed=P)
    inputs = (q, k, k_scale, w, ks, ke)
    got, _, _ = cp.context_parallel_topk(*inputs, K, P, deterministic)
    want = cp.whole_topk(*inputs, K, deterministic)
    assert got[0].shape == (T, K) and got[0].dtype == torch.int32 and got[1].dtype == torch.float32
    assert cp.same_result(got, want, deterministic)
    if not deterministic:
        got_i, got_v = got
        _, valid = check_selection_shape(got_i, ks, ke, K, relative=False)
        own = dsa_topk.indexer_scores(*inputs).gather(1, got_i.long().clamp(min=0))
        assert torch.equal(bits(own)[valid], bits(got_v)[valid]), "an index carries another key's score"


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs: the example's NCCL run under torchrun")
def test_example_under_torchrun_on_two_gpus():
    # `python -m torch.distributed.run` is what the torchrun script runs.
    # NVLink multicast stays off (the device notes), also in the children.
    env = dict(os.environ, NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               os.path.join(EXAMPLES, "context_parallel.py"), "--world-size", "2"]
    run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, f"exit code {run.returncode}\n{run.stdout[-4000:]}\n{run.stderr[-4000:]}"
    assert "matches the single call" in run.stdout and ": False" not in run.stdout
