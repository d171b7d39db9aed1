"""Bad inputs raise RuntimeError naming the argument and the broken rule, and
leave the caller's output buffers untouched."""

import pytest
import torch

import dsa_topk
from problems import FP8, make_problem

K = 512
T, N, H = 16, 4096, 64


@pytest.fixture(scope="module")
def good():
    return make_problem("model-like", "varlen", T, N, H=H, K=K, seed=50)


def fp8(x):
    return x.to(FP8)


def with_row(t, row, value):
    t = t.clone()
    t[row] = value
    return t


def wide_rows(k, stride):
    """k as a view into a [N, stride] buffer."""
    wide = torch.zeros(k.shape[0], stride, device=k.device)
    wide[:, :k.shape[1]] = k.float()
    return fp8(wide)[:, :k.shape[1]]


# (case, inputs -> modified inputs dict, message pattern)
BAD_INPUTS = [
    ("q dtype", lambda a: {**a, "q": a["q"].float().half()}, r"q: must have dtype Float8_e4m3fn"),
    ("q on the host", lambda a: {**a, "q": a["q"].cpu()}, r"q: must be a CUDA tensor"),
    ("q rank", lambda a: {**a, "q": a["q"].reshape(T, -1)}, r"q: must have 3 dimensions"),
    ("q not contiguous", lambda a: {**a, "q": fp8(a["q"].float().transpose(0, 1).contiguous().transpose(0, 1))},
     r"q: must be contiguous"),
    ("head_dim", lambda a: {**a, "q": fp8(a["q"].float()[..., :64].contiguous()),
                            "k": fp8(a["k"].float()[:, :64].contiguous())}, r"head_dim.*q\.size\(2\)"),
    ("num_heads", lambda a: {**a, "q": fp8(a["q"].float()[:, :16].contiguous()),
                             "w": a["w"][:, :16].contiguous()}, r"num_heads.*q\.size\(1\)"),
    ("k dtype", lambda a: {**a, "k": a["k"].float()}, r"k: must have dtype Float8_e4m3fn"),
    ("k columns", lambda a: {**a, "k": fp8(a["k"].float()[:, :64].contiguous())}, r"k: size\(1\) must be q\.size\(2\)"),
    ("k row stride", lambda a: {**a, "k": wide_rows(a["k"], 136)}, r"k_row_stride.*multiple of 16.*k\.stride\(0\)"),
    ("k on the host", lambda a: {**a, "k": a["k"].cpu()}, r"k: must be a CUDA tensor"),
    ("k_scale dtype", lambda a: {**a, "k_scale": a["k_scale"].half()}, r"k_scale: must have dtype Float"),
    ("k_scale length", lambda a: {**a, "k_scale": a["k_scale"][:-1]}, r"k_scale: size\(0\) must be k\.size\(0\)"),
    ("w dtype", lambda a: {**a, "w": a["w"].bfloat16()}, r"w: must have dtype Float"),
    ("w heads", lambda a: {**a, "w": a["w"][:, :32].contiguous()}, r"w: size\(1\) must be q\.size\(1\)"),
    ("ks dtype", lambda a: {**a, "ks": a["ks"].long()}, r"ks: must have dtype Int"),
    ("ke length", lambda a: {**a, "ke": a["ke"][:-1]}, r"ke: size\(0\) must be q\.size\(0\)"),
    ("ke on the host", lambda a: {**a, "ke": a["ke"].cpu()}, r"ke: must be a CUDA tensor"),
    ("ks > ke", lambda a: {**a, "ks": with_row(a["ks"], 3, int(a["ke"][3]) + 1)}, r"ks\[3\]: must be <= ke\[3\]"),
    ("ks < 0", lambda a: {**a, "ks": with_row(a["ks"], 5, -1)}, r"ks\[5\]: must be >= 0"),
    ("ke > N", lambda a: {**a, "ke": with_row(a["ke"], 0, N + 1)}, r"ke\[0\]: must be <= num_keys"),
]


def inputs_of(p):
    return dict(q=p.q, k=p.k, k_scale=p.k_scale, w=p.w, ks=p.ks, ke=p.ke)


def args(a):
    return a["q"], a["k"], a["k_scale"], a["w"], a["ks"], a["ke"]


@pytest.mark.parametrize("case,modify,pattern", BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
def test_bad_inputs_raise_and_leave_outputs_untouched(good, case, modify, pattern):
    a = modify(inputs_of(good))
    indices = torch.full((T, K), 777, dtype=torch.int32, device="cuda")
    values = torch.full((T, K), 3.5, device="cuda")
    with pytest.raises(RuntimeError, match=pattern):
        dsa_topk.indexer_topk_out(*args(a), indices, values)
    torch.cuda.synchronize()
    assert bool((indices == 777).all()) and bool((values == 3.5).all()), "a rejected call wrote its outputs"
    with pytest.raises(RuntimeError, match=pattern):
        dsa_topk.indexer_topk(*args(a), K)
    with pytest.raises(RuntimeError, match=pattern):
        dsa_topk.indexer_scores(*args(a))


BAD_OUTPUTS = [
    ("indices dtype", lambda: torch.full((T, K), 777, dtype=torch.int64, device="cuda"), None,
     r"indices: must have dtype Int"),
    ("indices rows", lambda: torch.full((T + 1, K), 777, dtype=torch.int32, device="cuda"), None,
     r"indices: size\(0\) must be q\.size\(0\)"),
    ("indices K", lambda: torch.full((T, 100), 777, dtype=torch.int32, device="cuda"), None,
     r"options\.k: must be one of 512, 1024, 2048.*indices\.size\(1\)"),
    ("indices on the host", lambda: torch.full((T, K), 777, dtype=torch.int32), None, r"indices: must be a CUDA tensor"),
    ("indices not contiguous", lambda: torch.full((T, 2 * K), 777, dtype=torch.int32, device="cuda")[:, :K], None,
     r"indices: must be contiguous"),
    ("values shape", lambda: torch.full((T, K), 777, dtype=torch.int32, device="cuda"),
     lambda: torch.full((T, K - 1), 3.5, device="cuda"), r"values: must have the shape of indices"),
    ("values dtype", lambda: torch.full((T, K), 777, dtype=torch.int32, device="cuda"),
     lambda: torch.full((T, K), 3.5, device="cuda", dtype=torch.float16), r"values: must have dtype Float"),
]


@pytest.mark.parametrize("case,make_indices,make_values,pattern", BAD_OUTPUTS, ids=[c[0] for c in BAD_OUTPUTS])
def test_bad_outputs_raise_and_stay_untouched(good, case, make_indices, make_values, pattern):
    indices = make_indices()
    values = make_values() if make_values else None
    before = indices.clone(), values.clone() if values is not None else None
    with pytest.raises(RuntimeError, match=pattern):
        dsa_topk.indexer_topk_out(*good.inputs(), indices, values)
    torch.cuda.synchronize()
    assert torch.equal(indices, before[0])
    if values is not None:
        assert torch.equal(values, before[1])


def test_bad_topk_arguments(good):
    with pytest.raises(RuntimeError, match=r"options\.k: must be one of 512, 1024, 2048.*\[options\.k is topk\]"):
        dsa_topk.indexer_topk(*good.inputs(), 100)
    with pytest.raises(RuntimeError, match=r"topk: must be one of"):
        dsa_topk.indexer_topk(*good.inputs(), -1)
    scores = dsa_topk.indexer_scores(*good.inputs())
    for bad, pattern in [
        (dict(scores=scores.double()), r"scores: must have dtype Float"),
        (dict(scores=scores.cpu()), r"scores: must be a CUDA tensor"),
        (dict(scores=scores.t()), r"scores: each row must be contiguous"),
        (dict(ks=with_row(good.ks, 2, int(good.ke[2]) + 1)), r"ks\[2\]: must be <= ke\[2\]"),
        (dict(ke=with_row(good.ke, 1, N + 5)), r"ke\[1\]: must be <= num_cols"),
        (dict(num_cols=N + 1), r"num_cols: must be in \[0, scores\.size\(1\)"),
        (dict(topk=1000), r"options\.k: must be one of"),
    ]:
        kw = dict(scores=scores, ks=good.ks, ke=good.ke, topk=K)
        kw.update(bad)
        with pytest.raises(RuntimeError, match=pattern):
            dsa_topk.topk(kw.pop("scores"), kw.pop("ks"), kw.pop("ke"), kw.pop("topk"), **kw)


def test_engine_functions_check_too(good):
    buffer = torch.full((T, K), 777, dtype=torch.int32, device="cuda")
    bad_ks = with_row(good.ks, 3, int(good.ke[3]) + 1)
    with pytest.raises(RuntimeError, match=r"ks\[3\]: must be <= ke\[3\]"):
        dsa_topk.vllm_indexer_topk_prefill(good.q, good.k, good.k_scale, good.w, bad_ks, good.ke, buffer,
                                           check_ranges=True)
    with pytest.raises(RuntimeError, match=r"q: must have dtype"):
        dsa_topk.sglang_indexer_topk_ragged(good.q.float(), (good.k, good.k_scale), good.w, good.ks, good.ke, K,
                                            out=buffer)
    with pytest.raises(RuntimeError, match=r"out: must have shape"):
        dsa_topk.sglang_indexer_topk_ragged(good.q, (good.k, good.k_scale), good.w, good.ks, good.ke, 2048,
                                            out=buffer)
    assert bool((buffer == 777).all())
