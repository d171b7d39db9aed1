#!/usr/bin/env bash
# `pip install .` on the device machine (issue 36), from a fresh copy of the
# tree, offline:
#   in a new venv that sees the image's torch, `pip install --no-build-isolation .`
#   (the README's command) and `pip wheel --no-build-isolation --no-deps .`;
#   then, from a folder outside the tree, one CUDA op call against a CPU
#   reference and the pytest suite (python/tests, copied out) against the
#   installed package. Writes $OUT/pip-summary.md (PASS/FAIL per step),
#   $OUT/pip.log, $OUT/pytest.xml and $OUT/wheel/*.whl; exits non-zero when
#   a step fails.
# Usage (device tool): command "bash scripts/pip-check.sh", no carry (the
# package needs neither GoogleTest nor nlohmann/json). A few minutes plus
# the suite.
# Environment: SKIP_PYTEST=1 skips the suite; PYTEST_ARGS adds pytest options
# (e.g. "-k graph"); PYTEST_TIMEOUT_S bounds it (default 240); PYTHON picks
# the interpreter that has torch (default python3).
# shellcheck disable=SC2317  # the helpers below run through run_logged
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
TREE="$PWD"
OUT="${OUT:-$PWD/pip-out}"
mkdir -p "$OUT"
LOG="$OUT/pip.log"
SUMMARY="$OUT/pip-summary.md"
: >"$LOG"
export PATH="/usr/local/cuda/bin:$PATH"
PYTHON="$(command -v "${PYTHON:-python3}")"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
VENV="$WORK/venv"
VPY="$VENV/bin/python"
# The build runs under pip: CMake takes its parallelism from here.
CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)"
export CMAKE_BUILD_PARALLEL_LEVEL
# No index to ask (the machine is offline), so none is asked.
export PIP_DISABLE_PIP_VERSION_CHECK=1
# The extension must be built with the system g++ (shared/h200.md): the
# image's default compiler (CXX=/opt/gcc/bin/g++) links libstdc++ statically
# into shared objects. CUDAHOSTCXX: nvcc's host compiler, for the core
# library's .cu files, the same one.
COMPILERS=(env CXX=/usr/bin/g++ CUDAHOSTCXX=/usr/bin/g++)
# Install and wheel share one build folder: the wheel is then a re-install,
# not a second build.
BUILD_DIR=(-C "build-dir=$WORK/build")

# shellcheck source=scripts/log-steps.sh
source scripts/log-steps.sh

# Runs "$@" in folder $1.
in_dir() { local dir="$1"; shift; (cd "$dir" && "$@"); }
ok() { [ -n "${RC[$1]+x}" ] && [ "${RC[$1]}" = 0 ]; }
# Whether file $1 has the modification time $2 ("" = absent) it had before.
unchanged() {
  local now
  now="$(stat -c %Y "$1" 2>/dev/null)"
  echo "$1: before ${2:-absent}, after ${now:-absent}"
  [ "$now" = "$2" ]
}
# Whether conftest's closing line ("dsa_topk: PATH ...") names the venv's package.
under_venv() {
  echo "$1"
  case "$1" in "dsa_topk: $(realpath "$VENV")/"*) return 0 ;; *) echo "not the venv's package"; return 1 ;; esac
}

# A venv made by an interpreter that is itself in a venv (the image's python3
# is /opt/torch/.venv/bin/python3) sees the base interpreter's packages, not
# that venv's, where torch is: then a .pth file adds the parent's folders.
# Without ensurepip the venv borrows the parent's pip the same way.
make_venv() {
  "$PYTHON" -m venv --system-site-packages "$VENV" ||
    { rm -rf "$VENV" && "$PYTHON" -m venv --system-site-packages --without-pip "$VENV"; } || return 1
  if ! "$VPY" -c 'import torch' 2>/dev/null; then
    local site
    site="$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" || return 1
    "$PYTHON" -c 'import site; print("\n".join(site.getsitepackages()))' >"$site/_parent_site.pth" || return 1
    echo "added the parent's site-packages: $(tr '\n' ' ' <"$site/_parent_site.pth")"
  fi
  "$VPY" - <<'PY'
import importlib.metadata as md
import sys
import torch
print("python", sys.executable, sys.version.split()[0])
print("torch", torch.__version__, "CUDA", torch.version.cuda, "at", torch.__file__)
for name in ("pip", "scikit-build-core", "pytest"):
    try:
        print(name, md.version(name))
    except md.PackageNotFoundError:
        print(name, "not installed")
PY
}

{
  echo "# pip install check $(date -u +%Y-%m-%dT%H:%MZ)"
  echo
  echo '```'
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1
  echo "python3: $PYTHON"
  cmake --version | head -1
  /usr/bin/g++ --version | head -1
  echo '```'
} >"$SUMMARY"

# A library a CMake build of this tree left here (a warm machine keeps
# ignored files between calls) is not pip's doing.
TREE_LIB=python/dsa_topk/libdsa_topk_ops.so
tree_lib_before="$(stat -c %Y "$TREE_LIB" 2>/dev/null)"

run_logged venv make_venv
if ok venv; then
  run_logged install "${COMPILERS[@]}" "$VPY" -m pip install --no-build-isolation --no-index -v "${BUILD_DIR[@]}" .
  # A dependency pip cannot resolve offline (one of torch's own, missing from
  # the image) fails the step above before any build; the rest can still run.
  if ! ok install && grep -qE 'No matching distribution|Could not find a version' "$LOG"; then
    run_logged install_no_deps "${COMPILERS[@]}" "$VPY" -m pip install --no-build-isolation --no-index --no-deps \
      -v "${BUILD_DIR[@]}" .
  fi
fi
installed=0
{ ok install || ok install_no_deps; } && installed=1

if [ "$installed" = 1 ]; then
  run_logged wheel "${COMPILERS[@]}" "$VPY" -m pip wheel --no-build-isolation --no-index --no-deps -v "${BUILD_DIR[@]}" \
    -w "$OUT/wheel" .
fi
if ok wheel; then
  run_logged wheel_contents "$VPY" - "$OUT/wheel" <<'PY'
import glob
import sys
import zipfile
wheels = glob.glob(f"{sys.argv[1]}/dsa_topk-*.whl")
assert len(wheels) == 1, f"expected one dsa_topk wheel, found {wheels}"
names = zipfile.ZipFile(wheels[0]).namelist()
print(wheels[0])
print("\n".join(names))
for need in ("dsa_topk/__init__.py", "dsa_topk/ops.py", "dsa_topk/libdsa_topk_ops.so"):
    assert need in names, f"{need} missing from the wheel"
PY
fi

# The build wrote no library into the tree: it lives only in the venv.
if [ "$installed" = 1 ]; then
  run_logged tree_untouched unchanged "$TREE_LIB" "$tree_lib_before"
fi

# One call of each kind from a folder outside the tree, against a CPU
# reference: small-integer FP8 values and power-of-two scales make every
# score exact in fp32, so the GPU must equal the float64 reference bit for bit
# and the deterministic sorted top-k must equal a stable sort of it.
cat >"$WORK/smoke.py" <<'PY'
import os
import sys

import torch

import dsa_topk

print("dsa_topk", dsa_topk.__file__)
print("ops library", dsa_topk.library_path)
assert os.path.realpath(dsa_topk.library_path).startswith(os.path.realpath(sys.prefix)), \
    "the ops library is not the venv's"
T, H, D, N, K = 4, 64, 128, 3000, 512
g = torch.Generator().manual_seed(0)
q = torch.randint(-3, 4, (T, H, D), generator=g).float()
k = torch.randint(-3, 4, (N, D), generator=g).float()
k_scale = torch.pow(2.0, torch.randint(-2, 3, (N,), generator=g).float())
w = torch.tensor([-2.0, -1.0, -0.5, 0.5, 1.0, 2.0])[torch.randint(0, 6, (T, H), generator=g)]
ks = torch.zeros(T, dtype=torch.int32)
ke = torch.full((T,), N, dtype=torch.int32)
dots = torch.einsum("thd,nd->thn", q.double(), k.double())
ref = (dots.clamp_min(0) * w.double()[:, :, None]).sum(dim=1) * k_scale.double()  # [T, N]
args = [x.cuda() for x in (q.to(torch.float8_e4m3fn), k.to(torch.float8_e4m3fn), k_scale, w, ks, ke)]
scores = dsa_topk.indexer_scores(*args)
assert torch.equal(scores.cpu().double(), ref), "indexer_scores differs from the CPU reference"
indices = dsa_topk.indexer_topk(*args, K, deterministic=True, sorted=True)
expected = torch.sort(-ref, dim=1, stable=True).indices[:, :K]  # descending, smallest index first on ties
assert torch.equal(indices.cpu().long(), expected), "indexer_topk differs from the CPU reference"
print(f"indexer_scores [{T}, {N}] and indexer_topk K={K}: equal to the CPU reference")
PY
if [ "$installed" = 1 ]; then
  run_logged smoke in_dir "$WORK" "$VPY" "$WORK/smoke.py"
fi

# The suite, copied out of the tree: its conftest then has no python/dsa_topk
# beside it and imports the installed package (its closing line names it).
if [ "$installed" = 1 ] && [ -z "${SKIP_PYTEST:-}" ]; then
  mkdir -p "$WORK/suite"
  cp -r python/tests "$WORK/suite/tests"
  cp -r python/examples "$WORK/suite/examples"  # tests that run the examples find them beside tests/
  # shellcheck disable=SC2086
  run_logged pytest in_dir "$WORK/suite" timeout "${PYTEST_TIMEOUT_S:-240}" "$VPY" -m pytest tests -q -rs \
    --durations=10 --junitxml="$OUT/pytest.xml" ${PYTEST_ARGS:-}
  pytest_header="$(section pytest | grep -m1 '^dsa_topk: ')"
  run_logged pytest_package under_venv "$pytest_header"
fi

{
  echo
  echo "## Steps"
  echo
  echo "| step | result | exit code | seconds |"
  echo "|---|---|---|---|"
  for name in "${STEPS[@]}"; do
    result=PASS
    [ "${RC[$name]}" = 0 ] || result=FAIL
    [ "${RC[$name]}" = 124 ] && result="FAIL (timed out)"
    echo "| $name | $result | ${RC[$name]} | ${SECS[$name]} |"
  done
  [ "$installed" = 1 ] || echo "| (the rest) | not run: nothing installed | | |"
  [ -n "${SKIP_PYTEST:-}" ] && echo "| pytest | skipped (SKIP_PYTEST) | | |"
  echo
  echo "Total: ${SECONDS} s. Tree: $TREE; venv: $VENV."
  section_tails 25 venv smoke wheel_contents
  for name in install install_no_deps wheel; do
    [ -n "${RC[$name]+x}" ] || continue
    ok "$name" && continue
    echo
    echo "## $name FAILED"
    echo '```'
    section "$name" | grep -E -B2 -A8 'error|Error|ERROR' | head -60
    echo '```'
  done
  if [ -n "${RC[pytest]+x}" ]; then
    echo
    echo "## pytest"
    echo
    echo "Package under test: ${pytest_header:-no 'dsa_topk:' line}"
    echo '```'
    section pytest | grep -vE '^\s*$' | tail -40
    echo '```'
  fi
} >>"$SUMMARY"
cat "$SUMMARY"
failed=0
[ "$installed" = 1 ] || failed=1
for name in "${STEPS[@]}"; do [ "${RC[$name]}" != 0 ] && failed=1; done
exit $failed
