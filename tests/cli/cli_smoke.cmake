# The CLI's observable behaviour: exit codes, verification, dumps, bad input.
# Invoked by CTest: cmake -DDSA_CLI=<dsa-topk> -DWORK_DIR=<dir> -P cli_smoke.cmake
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

# run_lacking(<expected exit code> <text the output must contain> <text it must not contain> args...)
function(run_lacking expected_rc must_contain must_lack)
  execute_process(COMMAND "${DSA_CLI}" ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc STREQUAL "${expected_rc}")
    message(FATAL_ERROR "dsa-topk ${ARGN}: exit code ${rc}, expected ${expected_rc}\n${out}\n${err}")
  endif()
  string(FIND "${out}${err}" "${must_contain}" pos)
  if(pos EQUAL -1)
    message(FATAL_ERROR "dsa-topk ${ARGN}: output lacks '${must_contain}'\n${out}\n${err}")
  endif()
  if(NOT must_lack STREQUAL "")
    string(FIND "${out}${err}" "${must_lack}" pos)
    if(NOT pos EQUAL -1)
      message(FATAL_ERROR "dsa-topk ${ARGN}: output has '${must_lack}'\n${out}\n${err}")
    endif()
  endif()
  message(STATUS "ok: dsa-topk ${ARGN}")
endfunction()

# run(<expected exit code> <text the output must contain> args...)
function(run expected_rc must_contain)
  run_lacking(${expected_rc} "${must_contain}" "" ${ARGN})
endfunction()

run(0 "usage: dsa-topk" --help)
# A check that ends within seconds prints no progress line.
run_lacking(0 "exact" "elapsed" check --dist ties --layout boundary --T 6 --N 3000 --K 512 --deterministic --sorted
            --values)
run(0 "exact" check --op topk --dist dead-relu --T 8 --N 5000 --K 1024)
run(0 "exact" bench --grid small --reps 1 --dist small-integer --K 512 --json "${WORK_DIR}/bench.json")
run(0 "varlen-batch" bench --T 6 --N 3000 --K 512 --layout varlen-batch --dist small-integer --reps 1)
run(0 "ties" bench --T 6 --N 3000 --K 512 --dist small-integer,ties --reps 1)
run(2 "--T and --N go together" bench --T 6)
run(2 "--grid and --T/--N are exclusive" bench --grid small --T 6 --N 3000)
run(2 "unknown distribution 'nope'" bench --T 6 --N 3000 --dist ties,nope)
run(2 "--op: expected indexer, scores, topk, decode or merge, got 'nope'" bench --op nope --T 6 --N 3000)
run(2 "--rest-ms: expected 0 to 10000 milliseconds" bench --backend cuda --T 6 --N 3000 --rest-ms -5)
run(2 "--rest-ms: rests the GPU (--backend cuda)" bench --T 6 --N 3000 --rest-ms 10)
run(2 "--route: the CUDA operators' option (--op indexer or --op decode, --backend cuda)" bench --op topk --T 6 --N 3000
    --route fused)
run(2 "--route: expected by-shape, fused or unfused, got 'sideways'" bench --backend cuda --T 6 --N 3000 --route sideways)
# The decode operator (indexer_topk_paged) on the CPU backend, and its argument errors.
run(0 "exact" check --op decode --dist small-integer,ties --B 2 --next-n 3 --L 700 --K 512 --block-size 16
    --deterministic --sorted --values)
run(0 "exact" bench --op decode --B 2 --next-n 2 --L 3000 --K 512 --reps 1 --json "${WORK_DIR}/decode.json")
run(2 "--route: the CUDA operator's option (--backend cuda)" bench --op decode --B 1 --next-n 1 --L 3000 --route unfused)
run(2 "--route: --op decode takes by-shape, fused-select, stream-select, bar-select or unfused, got 'fused'" bench --op decode --backend cuda --B 1
    --next-n 1 --L 3000 --route fused)
file(READ "${WORK_DIR}/decode.json" decode_json)
string(FIND "${decode_json}" "\"op\": \"decode\"" pos)
if(pos EQUAL -1)
  message(FATAL_ERROR "bench --op decode --json: no decode row in ${WORK_DIR}/decode.json")
endif()
run(0 "not verified" bench --op decode --B 1 --next-n 1 --L 1000 --K 512 --reps 1 --no-verify)
run(0 "exact" check --op decode --dist model-like --B 2 --L 900 --K 512 --table-keys 4000 --stale-table)
run(1 "options.k: must be one of 512, 1024, 2048" check --op decode --dist ties --B 1 --L 100 --K 100)
run(2 "--block-size: expected 16, 32, 64 or 128, got 48" bench --op decode --block-size 48)
run(2 "--next-n: expected 1 to 8, got 9" bench --op decode --next-n 9)
run(2 "--B: expected 1 to" bench --op decode --B 0)
run(2 "--L: expected 1 to" check --op decode --L -3)
run(2 "--B, --L: B * L = 4294967296 keys" bench --op decode --B 4096 --L 1048576)
run(2 "--grid: --op decode runs the decode grid, got 'small'" bench --op decode --grid small)
run(2 "--T: not an option of --op decode" bench --op decode --T 6 --N 3000)
run(2 "--relative: not an option of --op decode" check --op decode --relative)
run(2 "--B: the decode option (--op decode)" bench --B 4 --T 6 --N 3000)
run(2 "--block-size: the decode option (--op decode)" check --op topk --block-size 32)
run(2 "--stale-table: the decode option (--op decode)" bench --op topk --T 6 --N 3000 --stale-table)
# merge_topk on the CPU backend (short rows at 15 of 20: empty slots, a padded result), and its argument errors.
run(0 "exact" bench --op merge --backend cpu --dist model-like,ties --P 3 --R 20 --K 512 --part-k 300 --reps 1
    --json "${WORK_DIR}/merge.json")
file(READ "${WORK_DIR}/merge.json" merge_json)
string(FIND "${merge_json}" "\"op\": \"merge\"" pos)
if(pos EQUAL -1)
  message(FATAL_ERROR "bench --op merge --json: no merge row in ${WORK_DIR}/merge.json")
endif()
run_lacking(0 "exact" "WRONG" check --op merge --P 2 --R 17 --K 512 --deterministic)
run(0 "not verified" bench --op merge --P 2 --R 16 --K 512 --reps 1 --no-verify)
run(1 "options.k: must be one of 512, 1024, 2048" bench --op merge --P 2 --R 4 --K 100 --reps 1)
run(2 "--P: expected 1 to" bench --op merge --P 0)
run(2 "--R: expected 1 to" check --op merge --R 0)
run(2 "--part-k: expected 1 to" bench --op merge --part-k 0)
run(2 "--P, --part-k: a row's P * 4 * part_k = 4096000000 keys" bench --op merge --P 1000 --part-k 1024000)
run(2 "--P: the merge option (--op merge)" bench --P 2 --T 6 --N 3000)
run(2 "--part-k: the merge option (--op merge)" check --op decode --part-k 8)
run(2 "--T: not an option of --op merge" bench --op merge --T 6)
run(2 "--grid: not an option of --op merge" bench --op merge --grid small)
run(2 "--values: --op merge always returns values, sorted" check --op merge --values)
run(0 "wrote" generate --dist model-like --layout varlen-batch --T 5 --N 900 --K 512 --out "${WORK_DIR}/in.safetensors")
run(0 "checked 5 rows: 0 failed" replay "${WORK_DIR}/in.safetensors" --verify --relative --values
    --out "${WORK_DIR}/out.safetensors")
# --check-finite: a NaN in any input is named (exit code 1) before anything is written; without it
# NaN scores rank as -inf and the replay passes.
run(0 "replayed" replay "${WORK_DIR}/in.safetensors" --check-finite)
foreach(plant "k_scale;3;k_scale[3] is nan" "q;70;q: byte 70 is FP8 NaN" "k;300;k[2, 44] is FP8 NaN" "w;9;w[9] is nan")
  list(GET plant 0 tensor)
  list(GET plant 1 index)
  list(GET plant 2 message)
  execute_process(COMMAND "${DSA_PLANT_NAN}" "${WORK_DIR}/in.safetensors" "${WORK_DIR}/nan.safetensors" ${tensor}
                          ${index} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "plant_nan ${tensor} ${index}: exit code ${rc}")
  endif()
  run(0 "replayed" replay "${WORK_DIR}/nan.safetensors")
  run_lacking(1 "dsa-topk replay: non-finite input: ${message}" "wrote" replay "${WORK_DIR}/nan.safetensors"
              --check-finite --out "${WORK_DIR}/nan-out.safetensors")
endforeach()
if(EXISTS "${WORK_DIR}/nan-out.safetensors")
  message(FATAL_ERROR "replay --check-finite wrote ${WORK_DIR}/nan-out.safetensors from a rejected input")
endif()
file(WRITE "${WORK_DIR}/bad.safetensors" "this is not a safetensors file")
run(1 "bad.safetensors" replay "${WORK_DIR}/bad.safetensors")
run(1 "missing.safetensors" replay "${WORK_DIR}/missing.safetensors")
run(2 "unknown option --bogus" check --bogus 1)
run(2 "--T: expected an integer" check --T many)
run(2 "unknown command" frobnicate)
run(1 "options.k: must be one of 512, 1024, 2048" check --dist model-like --T 2 --N 100 --K 100)

# --help and -h: the program's and each command's usage and options, exit 0, nothing run ("[1/" starts a
# row's progress line), whatever else is on the line.
run(0 "commands:" -h)
foreach(command check bench replay generate)
  run_lacking(0 "usage: dsa-topk ${command}" "[1/" ${command} --help)
  run_lacking(0 "--help" "[1/" ${command} -h)
endforeach()
run_lacking(0 "--threads N" "[1/" check -h --T 6 --N 3000 --K 512)
run_lacking(0 "--rest-ms M" "[1/" bench --bogus -h)
run(0 "--verify" help replay)

# Unknown, misplaced and inapplicable arguments: errors that name them, exit code 2.
run(2 "unexpected argument 'stray'" check stray --T 6 --N 3000 --K 512)
run(2 "unexpected argument 'second.safetensors'" replay "${WORK_DIR}/in.safetensors" second.safetensors)
run(2 "expected the input file" replay --verify)
run(2 "unknown option -x" check -x)
run(2 "unknown command '--T' (options follow the command" --T 6 check)
run(2 "unknown option --op" replay "${WORK_DIR}/in.safetensors" --op indexer)
run(2 "unknown option --T" replay "${WORK_DIR}/in.safetensors" --T 6)
run(2 "unknown option --dist" replay "${WORK_DIR}/in.safetensors" --dist ties)
run(2 "--verify: takes no value, got 'yes'" replay "${WORK_DIR}/in.safetensors" --verify=yes)
run(2 "--T: given more than once" check --T 6 --T 7)
run(2 "--heads: not an option of --op topk" check --op topk --heads 32)
run(2 "--op scores: times the CUDA scoring kernel (--backend cuda)" bench --op scores --T 6 --N 3000)
run(2 "--deterministic: a selection option" bench --op scores --backend cuda --T 6 --N 3000 --deterministic)
run(2 "--baselines: times CUB beside the CUDA top-k" bench --op topk --T 6 --N 3000 --baselines)
run(2 "--warm-l2: keeps the GPU's L2 warm (--backend cuda)" bench --T 6 --N 3000 --warm-l2)
# A flag never takes the next word: the file after --verify is replay's input; --name=value works too.
run(0 "checked 5 rows: 0 failed" replay --verify "${WORK_DIR}/in.safetensors" --threads=2)
run(0 "exact" check --dist=ties --T=6 --N=3000 --K=512)

# Values out of range, named.
run(2 "--reps: expected 1 to 100000, got 0" bench --T 6 --N 3000 --reps 0)
run(2 "--reps: expected 1 to 100000, got -2" bench --T 6 --N 3000 --reps -2)
run(2 "--threads: expected 0 to 4096, got -3" check --threads -3)
run(2 "--T: expected 0 to 2147483647, got -1" check --T -1)
run(2 "--heads: expected 32 or 64, got 48" check --heads 48)
run(2 "--seed: expected 0 or more, got -1" generate --seed -1 --out "${WORK_DIR}/never.safetensors")
run(2 "--K: expected 512, 1024 or 2048, got 3000" generate --K 3000 --out "${WORK_DIR}/never.safetensors")
if(EXISTS "${WORK_DIR}/never.safetensors")
  message(FATAL_ERROR "generate wrote ${WORK_DIR}/never.safetensors from rejected options")
endif()
run(2 "--out: needs a value (--out FILE)" generate --out)
run(2 "--out: needs a value (--out FILE)" generate --out --K 512)

# bench's exit code: 1 when a row fails or errors.
run(1 "options.k: must be one of 512, 1024, 2048" bench --T 6 --N 3000 --K 3000 --dist ties --reps 1)

# Out of host memory: what was being generated, how large, what to change (8 PiB: more than any
# address space, so the allocation fails at once everywhere).
run(1 "out of host memory generating the fp32 score matrix [T, N] for T=1048576 N=2147483647 (about 8.0 PiB): a smaller --T or --N"
    check --op topk --dist ties --layout full --T 1048576 --N 2147483647 --K 512)

# The CUDA backend without a usable GPU: said so, before anything runs, exit code 1; bench prints no
# timing notes when nothing was timed. With a Hopper GPU the same commands run.
execute_process(COMMAND "${DSA_CLI}" check --backend cuda --dist ties --T 2 --N 3000 --K 512
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if("${out}${err}" MATCHES "sm_90a code only")
  message(STATUS "skipped: the CUDA backend cases (the GPU here is not Hopper)")
elseif("${out}${err}" MATCHES "no usable GPU")
  run(1 "--backend cuda: no usable GPU / CUDA driver found (CUDA runtime: " check --backend cuda --T 2 --N 3000 --K 512)
  run(1 "no usable GPU / CUDA driver found" replay "${WORK_DIR}/in.safetensors" --backend cuda)
  run(1 "no usable GPU / CUDA driver found" bench --op decode --backend cuda --B 1 --next-n 1 --L 1000 --K 512)
  run(1 "no usable GPU / CUDA driver found" bench --op merge --backend cuda --P 2 --R 4 --K 512)
  run_lacking(1 "no usable GPU / CUDA driver found" "timing:" bench --backend cuda --T 6 --N 3000 --K 3000 --reps 1)
else()
  run(0 "exact" check --backend cuda --dist ties --T 2 --N 3000 --K 512)
  run_lacking(0 "exact" "WRONG" bench --op merge --backend cuda --dist model-like,ties --P 3 --R 20 --K 512
              --part-k 300 --reps 2)
  run_lacking(1 "options.k" "timing:" bench --backend cuda --T 6 --N 3000 --K 3000 --reps 1)
  run(1 "dsa-topk replay: non-finite input: w[9] is nan" replay "${WORK_DIR}/nan.safetensors" --backend cuda
      --check-finite)
endif()

# A long CPU verification prints a progress line with the elapsed time and an ETA (the first one
# after 2 s; one thread makes this ~5 s here).
run(0 "s elapsed, ETA " check --dist ties --T 96 --N 65536 --K 512 --threads 1)
