// Linked into the test binaries that compile CPU kernels. A compiled kernel runs on the kernel
// threads from 2^15 units of work, but from 64 times that under OMP_WAIT_POLICY=PASSIVE
// (codegen/src/cpu/program.cpp), more than most test inputs have. The tests run their kernels
// threaded from 2^15 whatever the policy, so that the threaded paths (split reductions,
// flattened leading loops, row groups over threads) meet the sizes the tests use in every
// environment. Set before main, where the environment does not already say otherwise; the test
// of the default unsets it (ScopedEnv).
#include <cstdlib>

namespace {
[[maybe_unused]] const int kThreadCoverage = [] { return ::setenv("KILN_CPU_THREAD_MIN_WORK", "32768", 0); }();
}  // namespace
