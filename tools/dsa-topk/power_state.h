// The GPU's power state around the bench's timed calls.
//
// Under the H200's 700 W cap the SMs' effective clock falls once a load has
// run back to back for some tens of milliseconds: the scoring kernel at
// 4096 x 128K ran its first eight calls at 1.78 GHz (7.42 ms) and the rest
// at 1.59-1.62 GHz (8.2-8.3 ms), the same 13.2 M cycles each; after 50 ms
// of idle before each call it ran at 1.80 GHz (7.36 ms). The SM clock NVML
// reports stayed near 1.95 GHz throughout, and a probe kernel run after a
// call reads the clock of an unloaded chip (1.95-1.98 GHz), so neither
// measures it (docs/perf-log.md, "Session 24").
//
// Rows timed back to back therefore mix the two states by their length (a
// 64K row's 20 calls are mostly before the drop, a 128K row's mostly
// after). The bench can rest the GPU before each timed call to time every
// row at a rested card's clock, and measures the FP8 ceiling both in a
// burst and sustained (measure_gpu_ceilings).
#pragma once

namespace dsa::cli {

// Milliseconds the GPU rests (idle, after a device synchronize) before each
// timed call of a row: 0 (the default) times calls back to back, as an
// engine runs them.
void set_rest_ms(int ms);
int rest_ms();
// Rests for rest_ms() when it is set.
void rest_before_call();

}  // namespace dsa::cli
