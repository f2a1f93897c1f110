// Graphs traced from functions and from every workload, for the backend tests that run them.
#pragma once
#include <kiln/ir/graph.h>
#include <kiln/kiln.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "workloads.h"

namespace kiln::testing {

using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// The graphs `fn` traces into on `inputs` (each input set once: one path each).
inline std::vector<ir::Graph> trace(const Fn& fn, const std::vector<std::vector<Tensor>>& inputs) {
  CompileOptions o;
  o.backend = CompileOptions::Backend::Reference;
  auto f = compile(fn, o);
  for (const auto& in : inputs) f(in);
  std::vector<ir::Graph> out;
  for (const auto& gi : f.explain(inputs.back()).graphs) out.push_back(ir::parse(gi.text));
  return out;
}

// Every graph of every workload (all paths, small inputs), named "<workload> graph <i>".
inline std::vector<std::pair<std::string, ir::Graph>> workload_graphs() {
  namespace wl = kiln::workloads;
  std::vector<std::pair<std::string, ir::Graph>> out;
  for (const wl::Workload& w : wl::all_workloads()) {
    std::vector<std::vector<Tensor>> ins;
    for (int path = 0; path < w.paths; ++path) {
      ins.push_back(w.make_inputs(wl::Tier::Small, 1));
      if (w.steer) w.steer(ins.back(), path);
    }
    auto graphs = trace([&w](const std::vector<Tensor>& v) { return w.run(v); }, ins);
    for (size_t i = 0; i < graphs.size(); ++i) out.emplace_back(w.name + " graph " + std::to_string(i), std::move(graphs[i]));
  }
  return out;
}

}  // namespace kiln::testing
