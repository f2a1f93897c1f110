// The kernel profiler: the time each kernel of a compiled program takes, per kernel, on the
// device it runs on, as torch.profiler's kernel table gives it.
//
//   kiln::Profiler prof;                  // records from here
//   for (...) f(x);                       // compiled calls, eager ops on GPU tensors
//   std::cout << prof.stop().table();     // per kernel: calls, time, bytes, GB/s
//
// What is recorded: every kernel a compiled program runs (kiln::compile's graphs, and eager ops
// on GPU tensors, which are single-op programs), under its program's label and its place in the
// program ("k0 reduction sum,gt,mul [1048576]"); a program replayed as a CUDA graph is one
// record for the whole graph. Eager ops on CPU tensors are not kernels of a program and are not
// recorded.
//
// How it is timed: on the CPU the wall time of the kernel's call (its threads join before it
// returns); on a GPU the time between two events recorded on the device's stream around the
// kernel's launches, read when stop() waits for them (and every 4096 spans, when the oldest are
// read: a wait for the GPU to reach them, holding the profiler's lock), so profiling adds no
// synchronize between kernels. An event starts when the stream reaches it: on an idle GPU that
// is before the kernel's launch arrives, so a kernel launched onto an empty queue also counts
// the launch's latency (a few microseconds); and host threads that share a device's stream
// time each other's kernels where theirs interleave. Kernels inside a CUDA graph's capture are
// not timed apart.
//
// KILN_PROFILE=1 profiles the whole process and prints the table on stderr when it exits
// (KILN_PROFILE_TRACE=FILE: and writes the timeline there).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/runtime/device.h"

namespace kiln {

struct KernelProfile {
  std::string name;    // "<program label>: k0 reduction sum,gt,mul [1048576]"
  std::string device;  // "cpu", "cuda:0"
  int64_t calls = 0;
  double total_ms = 0, min_ms = 0, max_ms = 0;
  int64_t bytes = 0;  // read and written per call: the kernel's compulsory traffic (passes::traffic_bytes)
  double mean_ms() const { return calls > 0 ? total_ms / double(calls) : 0; }
  // bytes per call over the mean time per call (0 when nothing was timed)
  double gbps() const;
};

// One span of the timeline: a kernel's call.
struct ProfileEvent {
  size_t kernel = 0;     // index into ProfileReport::kernels
  double start_us = 0;   // from the profiler's start, on the host's clock (below)
  double dur_us = 0;
  int thread = 0;        // the host thread that ran it (numbered in the order threads first ran a
                         // span in this process); -1 on a GPU
};

struct ProfileReport {
  std::vector<KernelProfile> kernels;  // the largest total time first
  // Every span, in the order they ended (GPU spans in the order they were read), the first
  // kMaxEvents of them; `dropped_events` counts the rest (they are in `kernels` all the same).
  std::vector<ProfileEvent> events;
  size_t dropped_events = 0;
  static constexpr size_t kMaxEvents = size_t(1) << 20;

  double total_ms() const;
  // One line per kernel (the first `rows`; 0: all): total and share, calls, mean and min per
  // call, bytes per call and GB/s over the mean.
  std::string table(size_t rows = 0) const;
  // The timeline in the Trace Event format that chrome://tracing and Perfetto open: one
  // process per device ("cpu", "cuda:0"), one row per host thread on the CPU. A GPU's spans are
  // placed on the host's clock by its first span: the moment the stream reached that span's
  // start is taken as the moment the host enqueued it, so they may sit a little early (by as
  // long as the GPU was still busy with work from before).
  std::string chrome_trace() const;
};

// Records kernels from construction until stop() (or destruction). One at a time per process:
// a second one while another records raises kiln::Error. Thread-safe: kernels run on any thread
// are recorded.
class Profiler {
 public:
  Profiler();
  ~Profiler();
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;
  // Stops recording, waits for the GPU work it timed, and returns the records.
  ProfileReport stop();

 private:
  bool stopped_ = false;
};

namespace profile {

// Whether a profiler is recording (one relaxed atomic load: what the runner checks per kernel).
bool active();

// One timed span, as the kernel program runner and the CUDA graph replay take them:
//   profile::Scope s(device);          // (off unless a profiler records; off inside another span)
//   ...enqueue or run the kernel...
//   if (s.on()) s.finish(name, bytes);
// Only the outermost span of a thread is timed: the eager GPU ops a kernel runs inside its own
// span (a library call's steps, a kernel left to the runner) count as that kernel's time. A span
// begun under one profiler and ended under another, or after its profiler stopped, is dropped.
struct Span {
  bool on = false;
  Device device = Device::cpu();
  uint64_t session = 0;   // the profiler it belongs to
  int64_t t0_ns = 0;      // the CPU's start
  void* start = nullptr;  // a GPU's start event
};
Span begin(Device device);
void end(Span& s, const std::string& name, int64_t bytes);
void drop(Span& s) noexcept;  // ends a span without recording it

class Scope {
 public:
  explicit Scope(Device device) : span_(begin(device)) {}
  ~Scope() { drop(span_); }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;
  bool on() const { return span_.on; }
  void finish(const std::string& name, int64_t bytes) { end(span_, name, bytes); }

 private:
  Span span_;
};

// While one lives on a thread, spans begun on that thread are not timed: work enqueued during a
// CUDA graph's capture is captured, not run, and an event recorded in it would belong to the
// graph.
struct Pause {
  Pause();
  ~Pause();
  Pause(const Pause&) = delete;
  Pause& operator=(const Pause&) = delete;
};

}  // namespace profile
}  // namespace kiln
