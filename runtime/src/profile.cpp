// The kernel profiler (kiln/runtime/profile.h): spans on the CPU clock or between CUDA events,
// summed per kernel name and device.
#include "kiln/runtime/profile.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <locale>
#include <map>
#include <mutex>
#include <sstream>
#include <tuple>

#include "kiln/runtime/cuda.h"
#include "kiln/runtime/env.h"
#include "kiln/runtime/error.h"

namespace kiln {
namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// GPU spans whose events have not been read yet (all of the current session: a span of an
// earlier one is dropped when it ends).
struct Pending {
  size_t record;
  int device;
  cuda::Event* start;
  cuda::Event* end;
};

// A device's timeline anchor: an event recorded at its first span, and the host's time then.
struct GpuClock {
  cuda::Event* ref = nullptr;
  double host_us = 0;
};

std::atomic<int> next_thread{0};
int thread_lane() {
  thread_local int lane = next_thread++;
  return lane;
}

// Everything below is guarded by `mu`, but for `on` and `session`, which spans read first.
struct Recorder {
  std::atomic<bool> on{false};
  std::atomic<uint64_t> session{0};  // one per Profiler (and the process-wide one)
  bool process_wide = false;         // KILN_PROFILE=1: from the start to the process's exit
  std::mutex mu;
  std::map<std::tuple<std::string, std::string, int64_t>, size_t> index;  // (name, device, bytes) -> records[i]
  std::vector<KernelProfile> records;
  std::vector<Pending> pending;
  std::vector<std::unique_ptr<cuda::Event>> owned;  // every event made: reused, freed never
  std::map<int, std::vector<cuda::Event*>> spare;   // per device: those of `owned` not in a span
  int64_t t0_ns = now_ns();                         // the timeline's zero
  std::vector<ProfileEvent> events;                 // (kernel: an index into records until take())
  size_t dropped = 0;
  std::map<int, GpuClock> clocks;                   // per device, from its first span

  // A pending GPU span waits for this many others before the events are read (bounding the
  // events held; reading them waits for the GPU to reach the oldest, which it mostly has).
  static constexpr size_t kMaxPending = 4096;

  // (Bytes are part of the key: an eager op's name does not say its dtype or strides.)
  size_t record_of(const std::string& name, const Device& d, int64_t bytes) {
    auto key = std::tuple{name, d.str(), bytes};
    auto it = index.find(key);
    if (it != index.end()) return it->second;
    records.push_back(KernelProfile{name, d.str(), 0, 0, 0, 0, bytes});
    index.emplace(std::move(key), records.size() - 1);
    return records.size() - 1;
  }
  // A fresh session: the spans of the last read, then no records, no events, the timeline's
  // zero now, a new session number (a span still open is dropped when it ends).
  void restart() {
    try {
      resolve();
    } catch (const Error&) {  // (the old session's spans: no one reads them any more)
    }
    records.clear();
    index.clear();
    events.clear();
    dropped = 0;
    for (auto& [device, c] : clocks) give_back(device, c.ref);
    clocks.clear();
    t0_ns = now_ns();
    session++;
  }
  double host_us(int64_t t_ns) const { return double(t_ns - t0_ns) * 1e-3; }
  void add_event(size_t r, double start_us, double ms, int thread) {
    if (events.size() >= ProfileReport::kMaxEvents) {
      dropped++;
      return;
    }
    events.push_back({r, start_us, ms * 1e3, thread});
  }
  void add(size_t r, double ms) {
    KernelProfile& k = records[r];
    k.min_ms = k.calls == 0 ? ms : std::min(k.min_ms, ms);
    k.max_ms = k.calls == 0 ? ms : std::max(k.max_ms, ms);
    k.calls++;
    k.total_ms += ms;
  }
  cuda::Event* take_event(int device) {
    auto& v = spare[device];
    if (!v.empty()) {
      cuda::Event* e = v.back();
      v.pop_back();
      return e;
    }
    owned.push_back(std::make_unique<cuda::Event>(device));
    return owned.back().get();
  }
  void give_back(int device, cuda::Event* e) {
    if (e) spare[device].push_back(e);
  }
  // Reads every pending span's events, waiting for the GPU to reach them. Every span leaves
  // `pending` and gives its events back whatever happens; a span whose events cannot be read is
  // left out, and the first such error is raised after.
  void resolve() {
    std::vector<Pending> work;
    work.swap(pending);
    std::string error;
    for (const Pending& p : work) {
      try {
        p.end->synchronize();
        const double ms = double(p.start->elapsed_ms(*p.end));
        const GpuClock& c = clocks.at(p.device);
        const double start_us = c.host_us + 1e3 * double(c.ref->elapsed_ms(*p.start));
        add(p.record, ms);
        add_event(p.record, start_us, ms, -1);
      } catch (const std::exception& e) {
        if (error.empty()) error = e.what();
      }
      give_back(p.device, p.start);
      give_back(p.device, p.end);
    }
    if (!error.empty()) KILN_FAIL("profile", "reading the GPU's events: ", error);
  }
  ProfileReport take() {
    std::string error;
    try {
      resolve();
    } catch (const Error& e) {
      error = e.what();
    }
    ProfileReport r;
    std::vector<size_t> order(records.size());  // the records, largest total first
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return records[a].total_ms > records[b].total_ms; });
    std::vector<size_t> place(records.size());
    for (size_t i = 0; i < order.size(); ++i) {
      place[order[i]] = i;
      r.kernels.push_back(std::move(records[order[i]]));
    }
    r.events = std::move(events);
    for (ProfileEvent& e : r.events) e.kernel = place[e.kernel];
    r.dropped_events = dropped;
    records.clear();
    index.clear();
    events.clear();
    if (!error.empty()) throw Error(error);
    return r;
  }
};

Recorder& recorder() {
  // (never destroyed: the exit report and the events' reuse outlive static destruction order)
  static auto* r = new Recorder();
  return *r;
}

thread_local int paused = 0;  // profile::Pause
thread_local int depth = 0;   // open spans on this thread (only the outermost is timed)

// Reads the GPU's pending spans while the driver is still there (see process_wide below).
void resolve_at_exit() {
  Recorder& r = recorder();
  try {
    std::lock_guard<std::mutex> lock(r.mu);
    r.resolve();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln: the kernel profile's GPU times could not be read at exit: %s\n", e.what());
  }
}

void print_at_exit() {
  Recorder& r = recorder();
  std::string text;
  try {
    std::lock_guard<std::mutex> lock(r.mu);
    r.on = false;
    ProfileReport report = r.take();
    text = report.table();
    if (const std::string path = env::profile_trace(); !path.empty()) {
      const std::string trace = report.chrome_trace();
      std::FILE* f = std::fopen(path.c_str(), "w");
      bool ok = f && std::fwrite(trace.data(), 1, trace.size(), f) == trace.size();
      ok = f && std::fclose(f) == 0 && ok;
      text += ok ? "kernel timeline: " + path + "\n" : "kiln: cannot write the kernel timeline to " + path + "\n";
    }
  } catch (const std::exception& e) {
    text = std::string("kiln: the kernel profile could not be read at exit: ") + e.what() + "\n";
  }
  std::fputs(text.c_str(), stderr);
}

// KILN_PROFILE=1: recording from the library's load, the table printed by an exit handler
// registered then. The GPU's events are read by one more handler, registered when the first GPU
// span begins: after the driver was loaded, so that it runs before any exit handler the driver
// registered (exit handlers run in the reverse order of registration).
const bool process_wide = [] {
  try {
    if (!env::profile()) return false;
  } catch (const Error& e) {
    std::fprintf(stderr, "kiln: warning: %s (profiling stays off)\n", e.what());
    return false;
  }
  Recorder& r = recorder();
  r.process_wide = true;
  r.on = true;
  std::atexit(print_at_exit);
  return true;
}();
std::once_flag gpu_exit;

}  // namespace

double KernelProfile::gbps() const {
  const double ms = mean_ms();
  return ms > 0 ? double(bytes) / (ms * 1e6) : 0;
}

double ProfileReport::total_ms() const {
  double t = 0;
  for (const KernelProfile& k : kernels) t += k.total_ms;
  return t;
}

std::string ProfileReport::table(size_t rows) const {
  std::ostringstream os;
  const double all = total_ms();
  os << "kernel profile: " << kernels.size() << " kernel" << (kernels.size() == 1 ? "" : "s") << ", ";
  char buf[256];
  std::snprintf(buf, sizeof buf, "%.3f ms in all\n", all);
  os << buf;
  if (kernels.empty()) return os.str();
  std::snprintf(buf, sizeof buf, "%10s %6s %7s %10s %10s %12s %8s  %-7s %s\n", "total ms", "share", "calls", "mean us",
                "min us", "bytes/call", "GB/s", "device", "kernel");
  os << buf;
  const size_t n = rows == 0 ? kernels.size() : std::min(rows, kernels.size());
  for (size_t i = 0; i < n; ++i) {
    const KernelProfile& k = kernels[i];
    std::snprintf(buf, sizeof buf, "%10.3f %5.1f%% %7lld %10.2f %10.2f %12lld %8.1f  %-7s ", k.total_ms,
                  all > 0 ? 100 * k.total_ms / all : 0.0, static_cast<long long>(k.calls), 1e3 * k.mean_ms(),
                  1e3 * k.min_ms, static_cast<long long>(k.bytes), k.gbps(), k.device.c_str());
    os << buf << k.name << "\n";
  }
  if (n < kernels.size()) os << "(" << kernels.size() - n << " more)\n";
  return os.str();
}

namespace {
void json_string(std::ostringstream& os, const std::string& s) {
  os << '"';
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      os << '\\' << c;
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(c));
      os << buf;
    } else {
      os << c;
    }
  }
  os << '"';
}
int process_of(const std::string& device) {  // cpu: 0; cuda:N: N + 1
  return device.rfind("cuda:", 0) == 0 ? 1 + std::atoi(device.c_str() + 5) : 0;
}
}  // namespace

std::string ProfileReport::chrome_trace() const {
  std::ostringstream os;
  os.imbue(std::locale::classic());  // (a decimal point whatever the program's locale)
  os.precision(3);
  os << std::fixed << "{\"displayTimeUnit\": \"ns\", \"traceEvents\": [";
  std::map<int, std::string> processes;
  for (const KernelProfile& k : kernels) processes.emplace(process_of(k.device), k.device);
  bool first = true;
  for (const auto& [pid, device] : processes) {
    os << (first ? "\n" : ",\n") << "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": " << pid
       << ", \"args\": {\"name\": ";
    json_string(os, device);
    os << "}}";
    first = false;
  }
  for (const ProfileEvent& e : events) {
    const KernelProfile& k = kernels.at(e.kernel);
    os << (first ? "\n" : ",\n") << "{\"name\": ";
    json_string(os, k.name);
    os << ", \"cat\": \"kernel\", \"ph\": \"X\", \"ts\": " << e.start_us << ", \"dur\": " << e.dur_us
       << ", \"pid\": " << process_of(k.device) << ", \"tid\": " << std::max(e.thread, 0)
       << ", \"args\": {\"bytes\": " << k.bytes << "}}";
    first = false;
  }
  os << "\n]}\n";
  return os.str();
}

Profiler::Profiler() {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  KILN_CHECK(!r.on, "profile", "a profiler is already recording",
             r.process_wide ? " (KILN_PROFILE=1 records the whole process)" : "", ": one at a time");
  r.restart();
  r.on = true;
}

Profiler::~Profiler() {
  if (stopped_) return;
  try {
    (void)stop();
  } catch (...) {  // (a destructor must not throw; stop() reports the error to a caller who asks)
  }
}

ProfileReport Profiler::stop() {
  KILN_CHECK(!stopped_, "profile", "stop: this profiler has already stopped");
  stopped_ = true;
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  r.on = false;
  return r.take();
}

namespace profile {

bool active() { return recorder().on.load(std::memory_order_relaxed); }

Span begin(Device device) {
  Span s;
  if (!active() || paused > 0 || depth > 0) return s;
  Recorder& r = recorder();
  s.device = device;
  if (device.is_cpu()) {
    s.session = r.session.load();
    s.t0_ns = now_ns();
  } else {
    if (r.process_wide) std::call_once(gpu_exit, [] { std::atexit(resolve_at_exit); });
    std::lock_guard<std::mutex> lock(r.mu);
    s.session = r.session.load();
    auto record = [&] {  // a spare event recorded on the device's stream now
      cuda::Event* e = r.take_event(device.index);
      try {
        e->record();
      } catch (...) {
        r.give_back(device.index, e);
        throw;
      }
      return e;
    };
    if (!r.clocks.count(device.index)) {  // the device's anchor on the host's clock
      cuda::Event* ref = record();
      r.clocks[device.index] = GpuClock{ref, r.host_us(now_ns())};
    }
    s.start = record();
  }
  s.on = true;
  depth++;
  return s;
}

void drop(Span& s) noexcept {
  if (!s.on) return;
  s.on = false;
  depth--;
  if (s.start) {
    Recorder& r = recorder();
    std::lock_guard<std::mutex> lock(r.mu);
    r.give_back(s.device.index, static_cast<cuda::Event*>(s.start));
    s.start = nullptr;
  }
}

void end(Span& s, const std::string& name, int64_t bytes) {
  if (!s.on) return;
  Recorder& r = recorder();
  if (s.device.is_cpu()) {
    const double ms = double(now_ns() - s.t0_ns) * 1e-6;
    const int thread = thread_lane();
    drop(s);
    std::lock_guard<std::mutex> lock(r.mu);
    if (!r.on || s.session != r.session.load()) return;
    const size_t k = r.record_of(name, s.device, bytes);
    r.add(k, ms);
    r.add_event(k, r.host_us(s.t0_ns), ms, thread);
    return;
  }
  cuda::Event* stop = nullptr;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    stop = r.take_event(s.device.index);
  }
  try {
    stop->record();
  } catch (...) {
    {
      std::lock_guard<std::mutex> lock(r.mu);
      r.give_back(s.device.index, stop);
    }
    drop(s);  // (gives the start event back: it takes the lock itself)
    throw;
  }
  auto* start = static_cast<cuda::Event*>(s.start);
  s.start = nullptr;  // (the span owns its events no more)
  drop(s);
  std::lock_guard<std::mutex> lock(r.mu);
  if (!r.on || s.session != r.session.load()) {  // (a span of a profiler that stopped: dropped)
    r.give_back(s.device.index, start);
    r.give_back(s.device.index, stop);
    return;
  }
  r.pending.push_back({r.record_of(name, s.device, bytes), s.device.index, start, stop});
  if (r.pending.size() < Recorder::kMaxPending) return;
  try {
    r.resolve();
  } catch (const Error& e) {  // (a kernel's caller is not the place for a profiler's error)
    std::fprintf(stderr, "kiln: warning: %s (those spans are left out of the profile)\n", e.what());
  }
}

Pause::Pause() { ++paused; }
Pause::~Pause() { --paused; }

}  // namespace profile
}  // namespace kiln
