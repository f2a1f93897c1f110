#include "../passes.h"
namespace kiln::passes {
bool dead_code(ir::Graph&) { return false; }
bool common_subexpr(ir::Graph&) { return false; }
bool fold_constants(ir::Graph&) { return false; }
bool simplify(ir::Graph&) { return false; }
bool forward_writes(ir::Graph&) { return false; }
}
