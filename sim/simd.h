#pragma once
// MOBISIM_AVX2_CLONE: compiles a function a second time for AVX2 and picks that version at load
// time where the CPU has it (GCC target_clones, an ifunc). For loops over independent lanes (GCC
// vector extensions, or loops the compiler vectorises without reordering any lane's sums): one
// register holds twice the lanes and every lane's operations and their order stay the same, so
// the results are bit for bit those of the default version. AVX2 brings no FMA for the compiler
// to contract a multiply and an add into (the "fma" target is not asked for). Not under
// ThreadSanitizer, whose runtime is not up when the load-time resolver runs.
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define MOBISIM_TSAN 1
#endif
#endif
#if defined(__x86_64__) && !defined(__SANITIZE_THREAD__) && !defined(MOBISIM_TSAN)
#define MOBISIM_AVX2_CLONE __attribute__((target_clones("avx2", "default")))
#else
#define MOBISIM_AVX2_CLONE
#endif

// MOBISIM_X86_DISPATCH: a translation unit may compile a kernel for AVX2 itself ([[gnu::target]])
// and pick it at run time with cpu_has_avx2(), under the same rules (no FMA, lane-wise operations).
#if defined(__x86_64__)
#define MOBISIM_X86_DISPATCH 1
namespace mobisim::sim {
inline bool cpu_has_avx2() { return __builtin_cpu_supports("avx2"); }
}  // namespace mobisim::sim
#else
#define MOBISIM_X86_DISPATCH 0
#endif
