// KILN_LOGS diagnostics (see log.h).
#include "kiln/runtime/log.h"

#include <cstdio>
#include <mutex>

#include "kiln/runtime/env.h"

namespace kiln::logs {

std::string_view name(Channel c) {
  switch (c) {
    case Channel::Recompiles: return "recompiles";
    case Channel::Guards: return "guards";
    case Channel::GraphBreaks: return "graph_breaks";
    case Channel::Cache: return "cache";
    case Channel::PerfHints: return "perf_hints";
  }
  return "?";
}

bool enabled(Channel c) {
  const std::string v = env::logs();
  if (v.empty()) return false;
  const std::string_view want = name(c);
  size_t start = 0;
  while (start <= v.size()) {
    size_t end = v.find(',', start);
    if (end == std::string::npos) end = v.size();
    std::string_view item(v.data() + start, end - start);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (!item.empty() && item.front() == '+') item.remove_prefix(1);  // TORCH_LOGS's spelling
    if (item == want || item == "all") return true;
    start = end + 1;
  }
  return false;
}

void emit(Channel c, const std::string& line) {
  if (!enabled(c)) return;
  static std::mutex mu;  // whole lines from concurrent threads
  std::lock_guard<std::mutex> lock(mu);
  std::fprintf(stderr, "[kiln:%.*s] %s\n", int(name(c).size()), name(c).data(), line.c_str());
}

}  // namespace kiln::logs
