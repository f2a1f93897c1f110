// kiln::cond: structured control flow. Eagerly it runs the branch the predicate picks; while
// tracing it traces both branches into regions of one `cond` node, so there is no graph break.
#include "kiln/compile.h"
#include "tracer.h"

namespace kiln::detail {

namespace {

// Traces one branch on `operands` into a graph; returns its real outputs through `outs`.
ir::Graph trace_branch(const char* which, const BranchFn& fn, const std::vector<Tensor>& operands,
                       std::vector<Tensor>& outs, Tracer* parent) {
  std::vector<CallArg> args;
  for (const Tensor& t : operands) {
    CallArg a;
    a.tensor = t;
    a.is_tensor = true;
    args.push_back(a);
  }
  Tracer branch(args, {}, /*fullgraph=*/true, parent);
  try {
    trace::Install install(&branch);
    outs = fn(operands);
  } catch (const Error& e) {
    KILN_FAIL("cond", "while tracing the ", which, " branch: ", e.what());
  }
  KILN_CHECK(branch.captures().empty(), "cond", "the ", which, " branch uses a tensor that is not one of its "
             "operands; pass every tensor a branch reads as an operand");
  KILN_CHECK(!branch.writes_inputs(), "cond", "the ", which, " branch writes into one of its operands; "
             "branches must be functional");
  auto chain = branch.finish(outs);
  ir::Graph g = std::move(chain->graph);
  return g;
}

}  // namespace

std::vector<Tensor> cond_impl(const Tensor& pred, const BranchFn& then_fn, const BranchFn& else_fn,
                              const std::vector<Tensor>& operands, std::source_location) {
  trace::Internal internal_;  // cond's own checks of shapes are not the user's reads
  KILN_CHECK(pred.defined() && pred.numel() == 1, "cond", "the predicate must be a one-element tensor, got shape ",
             pred.defined() ? pred.sizes().vec() : std::vector<int64_t>{});
  auto* tracer = dynamic_cast<Tracer*>(trace::active());
  if (!tracer) {
    bool p;
    {
      trace::Pause pause;  // not tracing (or tracing for someone else): a plain branch
      p = bool(pred);
    }
    return p ? then_fn(operands) : else_fn(operands);
  }
  bool p;
  std::vector<Tensor> then_out, else_out;
  ir::Graph then_g, else_g;
  {
    trace::Pause pause;
    p = bool(pred);
    // The branch not taken runs on copies, so nothing it does reaches the caller's tensors.
    std::vector<Tensor> copies;
    for (const Tensor& t : operands) copies.push_back(t.clone());
    then_g = trace_branch("then", then_fn, p ? operands : copies, then_out, tracer);
    else_g = trace_branch("else", else_fn, p ? copies : operands, else_out, tracer);
  }
  KILN_CHECK(then_out.size() == else_out.size(), "cond", "the branches return ", then_out.size(), " and ",
             else_out.size(), " tensors");
  for (size_t k = 0; k < then_out.size(); ++k)
    KILN_CHECK(then_out[k].dtype() == else_out[k].dtype() && then_out[k].sizes() == else_out[k].sizes(), "cond",
               "output ", k, " differs between the branches: ", name(then_out[k].dtype()), then_out[k].sizes().vec(),
               " vs ", name(else_out[k].dtype()), else_out[k].sizes().vec());
  then_g.set_name("then");
  else_g.set_name("else");
  std::vector<Tensor> outs = p ? then_out : else_out;
  tracer->record_cond(pred, operands, std::move(then_g), std::move(else_g), outs);
  return outs;
}

}  // namespace kiln::detail
