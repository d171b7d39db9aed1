"""The dsa_topk pytest suite runs on an H100/H200 (sm_90a build): elsewhere
every test is skipped with the reason. The package is imported from python/
(this folder's parent), where the build puts libdsa_topk_ops.so."""

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))


def _why_not_hopper():
    if not torch.cuda.is_available():
        return "no CUDA device"
    major, minor = torch.cuda.get_device_capability()
    if (major, minor) != (9, 0):
        return f"compute capability {major}.{minor}; the library holds sm_90a code only (H100/H200)"
    return None


def pytest_collection_modifyitems(config, items):
    why = _why_not_hopper()
    if why:
        for item in items:
            item.add_marker(pytest.mark.skip(reason=why))
