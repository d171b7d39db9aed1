#!/usr/bin/env bash
# On the GPU machine: ncu profiles of named kernels at fixed shapes, each as
# its details page and its per-SASS-instruction source counters, packed into
# ONE file, $OUT/profile-pack.tar.gz (the device tool returns at most 8
# files a call, and a report's own .ncu-rep cannot be opened where there is
# no ncu). Read here with:
#   tar xzf profile-pack.tar.gz && python3 scripts/ncu_source_summary.py NAME-sass.csv.gz
# Usage: bash scripts/profile-pack.sh [--dsa-topk PATH] TARGET...
#   cluster   topk_cluster_kernel, decode 1 x 128K (one launch)
#   paged     indexer_scores_kernel over the paged cache, decode 256 x 128K
#   paged1    the same kernel at decode 1 x 128K (latency-bound: one request)
#   pagedmath the same kernel as the decode math-only control (ChecksumSink), 256 x 128K
#   hist1     the same kernel as the fused selection's scoring launch
#             (HistStoreSink, --route fused-select), 1 x 128K
#   select1   the fused selection's select kernel after it, 1 x 128K
#   stream    the same kernel with the streaming selection (StreamSelectSink,
#             --route stream-select), 256 x 128K
#   bar       the same kernel with the bar selection (BarFilterSink,
#             --route bar-select), 256 x 128K
#   barselect the bar selection's select stage after it, 256 x 128K
#   merge     merge_kernel, P 8 x R 4096 parts at K 2048
#   scores    indexer_scores_kernel (StoreSink), 4096 x 32K
#   topk128k  the standalone top-k at 4096 x 128K
#   filter    the fused filter (the scoring kernel with FilterSink), 4096 x 128K
#             on the fused route
# Builds dsa-topk into build-profile unless --dsa-topk names one. Exit code:
# the number of targets that failed (0: all profiled).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
OUT="${OUT:-$PWD/profile-out}"
export PATH="/usr/local/cuda/bin:$PATH"
bin=""
if [ "${1:-}" = --dsa-topk ]; then
  bin="${2:?--dsa-topk needs a path}"
  shift 2
fi
if [ "$#" = 0 ]; then
  echo "usage: scripts/profile-pack.sh [--dsa-topk PATH] cluster|paged|paged1|pagedmath|hist1|select1|stream|bar|barselect|merge|scores|topk128k|filter ..." >&2
  exit 2
fi
mkdir -p "$OUT"
if [ -z "$bin" ]; then
  if ! (cmake -S . -B build-profile -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null &&
        cmake --build build-profile -j "$(nproc)" --target dsa-topk >/dev/null); then
    echo "error: dsa-topk did not build" >&2
    exit 2
  fi
  bin=build-profile/dsa-topk
fi
work="$(mktemp -d)"
failed=0
profile() {  # NAME KERNEL_REGEX BENCH_ARGS...
  local name="$1" kernel="$2"
  shift 2
  echo "== $name: -k regex:$kernel, dsa-topk bench $*"
  if timeout 240 ncu --clock-control none --kernel-name-base demangled -k "regex:$kernel" \
       --launch-skip 1 --launch-count 1 \
       --set full --import-source yes -o "$work/$name" "$bin" bench --backend cuda "$@" --reps 3 --no-verify \
       >"$work/$name-run.log" 2>&1 && [ -f "$work/$name.ncu-rep" ]; then
    # Every section's tables too (the memory tables break the L2's traffic
    # down by source and operation); older ncu without the option: the page.
    ncu --import "$work/$name.ncu-rep" --page details --print-details all >"$work/$name-details.txt" 2>&1 ||
      ncu --import "$work/$name.ncu-rep" --page details >"$work/$name-details.txt" 2>&1
    ncu --import "$work/$name.ncu-rep" --page source --csv --print-source sass | gzip >"$work/$name-sass.csv.gz"
    grep -E "Duration|Elapsed Cycles|SM Active Cycles|SM Frequency" "$work/$name-details.txt" | head -4
    rm -f "$work/$name.ncu-rep"
  else
    echo "   failed (log: $name-run.log in the pack)"
    failed=$((failed + 1))
  fi
}
for target in "$@"; do
  case "$target" in
    cluster) profile cluster topk_cluster --op decode --B 1 --next-n 1 --L 131072 ;;
    paged) profile paged indexer_scores --op decode --B 256 --next-n 1 --L 131072 ;;
    paged1) profile paged1 indexer_scores --op decode --B 1 --next-n 1 --L 131072 ;;
    pagedmath) profile pagedmath "indexer_scores.*ChecksumSink" --op decode --B 256 --next-n 1 --L 131072 ;;
    hist1) profile hist1 "indexer_scores.*HistStoreSink" --op decode --B 1 --next-n 1 --L 131072 \
      --route fused-select ;;
    select1) profile select1 paged_select_kernel --op decode --B 1 --next-n 1 --L 131072 --route fused-select ;;
    stream) profile stream "indexer_scores.*StreamSelectSink" --op decode --B 256 --next-n 1 --L 131072 \
      --route stream-select ;;
    bar) profile bar "indexer_scores.*BarFilterSink" --op decode --B 256 --next-n 1 --L 131072 \
      --route bar-select ;;
    barselect) profile barselect "fused::select_kernel" --op decode --B 256 --next-n 1 --L 131072 --route bar-select ;;
    merge) profile merge merge_kernel --op merge --P 8 --R 4096 ;;
    scores) profile scores indexer_scores --op scores --T 4096 --N 32768 ;;
    topk128k) profile topk128k "topk_" --op topk --T 4096 --N 131072 ;;
    filter) profile filter "FilterSink" --op indexer --route fused --T 4096 --N 131072 ;;
    *) echo "unknown target '$target'" >&2; failed=$((failed + 1)) ;;
  esac
done
tar czf "$OUT/profile-pack.tar.gz" -C "$work" .
echo "packed $(ls "$work" | wc -l) files into $OUT/profile-pack.tar.gz ($(du -h "$OUT/profile-pack.tar.gz" | cut -f1))"
exit "$failed"
