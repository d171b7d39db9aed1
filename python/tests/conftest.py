"""The dsa_topk pytest suite runs on an H100/H200 (sm_90a build): elsewhere
every test is skipped with the reason. It tests the package in python/ (this
folder's parent) when the CMake build has put libdsa_topk_ops.so there or
DSA_TOPK_LIBRARY names one, and otherwise the installed package (`pip
install --no-build-isolation .`); the line `dsa_topk: ...` above pytest's
closing summary says which."""

import importlib.util
import os
import sys

import pytest
import torch

_SOURCE = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
_BUILT_HERE = os.environ.get("DSA_TOPK_LIBRARY") or os.path.exists(
    os.path.join(_SOURCE, "dsa_topk", "libdsa_topk_ops.so"))
# Neither built here nor installed: the source package's import error then
# says how to build.
if _BUILT_HERE or importlib.util.find_spec("dsa_topk") is None:
    sys.path.insert(0, _SOURCE)


def pytest_terminal_summary(terminalreporter):
    try:
        import dsa_topk
    except Exception as e:  # noqa: BLE001  (any import failure: the test modules failed with it too)
        terminalreporter.write_line(f"dsa_topk: not importable: {e}")
        return
    where = os.path.realpath(os.path.dirname(dsa_topk.__file__))
    terminalreporter.write_line(f"dsa_topk: {where} (ops library {dsa_topk.library_path})")


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
