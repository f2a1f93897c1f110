// kiln's kernel threads: a pool that the compiled CPU kernels split their loops over.
//
// Why not an OpenMP parallel region: a region ends at a barrier that waits for every thread of
// the team, so on a machine another process keeps busy a kernel of microseconds waits for a
// thread the OS has not scheduled (a time slice: milliseconds). Here the calling thread takes
// parts of the work too, and waits only for the parts a worker has started: a worker that is
// not running costs nothing, the caller does its parts. Workers spin briefly after a job (kernels
// of one program follow each other closely), then sleep until the next.
#pragma once
#include <cstdint>

namespace kiln::parallel {

// The threads a job may use: the caller and the pool's workers (KILN_NUM_THREADS, or OpenMP's
// default: the cores).
int threads();

// Calls body(context, part) for every part in [0, parts), on the calling thread and the pool's
// workers; returns when every part has run. Parts are claimed in order, each once. A body must
// not throw. A job started from inside a job (or while another thread's job holds the pool)
// runs all its parts on the calling thread.
using Body = void (*)(void* context, int part);
void run(int parts, Body body, void* context);

// The same for a callable: run(parts, [&](int part) { ... }).
template <typename F>
void run(int parts, F&& f) {
  run(parts, [](void* c, int part) { (*static_cast<F*>(c))(part); }, static_cast<void*>(&f));
}

// Whether the calling thread runs a part of a job (a pool worker, or a caller inside its job).
bool in_job();

// Statistics for the tests: parts run by workers (not the caller) since the process started.
uint64_t parts_run_by_workers();

}  // namespace kiln::parallel
