"""dsa_topk: exact DSA Indexer top-k on Hopper, as PyTorch ops.

Importing the package loads the compiled ops library (libdsa_topk_ops.so,
beside this file: installed there by `pip install --no-build-isolation .` or
written there by the CMake build; see the README, "Using the library from
PyTorch"), registers the fake implementations that torch.compile traces
with, and exports:

- the ops, also reachable as ``torch.ops.dsa_topk.<name>``:
  :func:`indexer_topk`, :func:`indexer_topk_out`, :func:`topk`,
  :func:`indexer_scores`, :func:`indexer_topk_paged`,
  :func:`indexer_topk_paged_out`, :func:`merge_topk`;
- drop-in replacements for the engines' indexer stage, prefill
  (:func:`vllm_indexer_topk_prefill`, :func:`sglang_indexer_topk_ragged`) and
  decode over the paged cache (:func:`vllm_indexer_topk_decode`,
  :func:`sglang_indexer_topk_paged`).

Set DSA_TOPK_LIBRARY to load the ops library from another path.
"""

import os

import torch


def _load_library() -> str:
    path = os.environ.get("DSA_TOPK_LIBRARY") or os.path.join(os.path.dirname(__file__), "libdsa_topk_ops.so")
    if not os.path.exists(path):
        raise ImportError(
            f"dsa_topk: the ops library {path} does not exist. Install the package from the repository "
            "root with\n"
            "  pip install --no-build-isolation .\n"
            "or build the library for this tree with\n"
            "  cmake -S . -B build-python -G Ninja -DDSA_BUILD_PYTHON=ON -DDSA_BUILD_TESTS=OFF "
            "-DCMAKE_CXX_COMPILER=/usr/bin/g++ -DCMAKE_CUDA_HOST_COMPILER=/usr/bin/g++ && "
            "cmake --build build-python --target dsa_topk_ops\n"
            "or point DSA_TOPK_LIBRARY at a built libdsa_topk_ops.so."
        )
    torch.ops.load_library(path)
    return path


library_path = _load_library()

from . import _fake  # noqa: E402,F401  (registers the fake implementations)
from .engines import (sglang_indexer_topk_paged, sglang_indexer_topk_ragged,  # noqa: E402
                      vllm_indexer_topk_decode, vllm_indexer_topk_prefill)
from .ops import (indexer_scores, indexer_topk, indexer_topk_out, indexer_topk_paged,  # noqa: E402
                  indexer_topk_paged_out, merge_topk, topk)

__all__ = [
    "indexer_topk",
    "indexer_topk_out",
    "topk",
    "indexer_scores",
    "indexer_topk_paged",
    "indexer_topk_paged_out",
    "merge_topk",
    "vllm_indexer_topk_prefill",
    "sglang_indexer_topk_ragged",
    "vllm_indexer_topk_decode",
    "sglang_indexer_topk_paged",
    "library_path",
]
