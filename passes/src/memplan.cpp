// Memory planning: where each temporary lives in the arena, and the peak estimate.
//
// Liveness is counted in kernels: a temporary is live from the kernel that first writes it to
// the last kernel that reads it. Walking the kernels in order, a temporary that dies at kernel k
// frees its bytes after k; one born at k takes the best-fitting free block, or grows the arena.
// In place: a temporary born at k may take the bytes of one that dies at k when k reads the old
// one and writes the new one through the same index and element size, element by element, and
// reads each element before it writes it (in_place_pair).
// Output buffers are allocated per run and returned; they count towards the peak from the
// kernel that writes them.
#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "lower.h"
#include "schedule.h"

namespace kiln::passes {

namespace {

constexpr int64_t kArenaAlign = 64;  // cache line and the widest vector (AVX-512) the backends use
int64_t round_up(int64_t x) { return (x + kArenaAlign - 1) / kArenaAlign * kArenaAlign; }

struct Life {
  int first = -1, last = -1;
};
std::vector<Life> lifetimes(const KernelProgram& p) {
  std::vector<Life> life(p.buffers.size());
  for (size_t k = 0; k < p.kernels.size(); ++k) {
    auto touch = [&](const Access& a) {
      if (a.buffer < 0) return;
      Life& l = life[size_t(a.buffer)];
      if (l.first < 0) l.first = int(k);
      l.last = int(k);
    };
    for (const Access& a : p.kernels[k].stores) touch(a);
    for (const Access& a : p.kernels[k].loads) touch(a);
  }
  for (const Access& o : p.outputs)
    if (o.buffer >= 0) life[size_t(o.buffer)].last = int(p.kernels.size());
  return life;
}

void compute_peak(KernelProgram& p, const std::vector<Life>& life) {
  // A sweep over the kernels: each buffer enters at its first kernel and leaves after its last
  // (a pass over every buffer per kernel was quadratic in a long trace's program).
  const size_t nk = p.kernels.size();
  std::vector<int64_t> delta(nk + 1, 0);                          // unplanned bytes live, by difference
  std::vector<std::vector<int64_t>> enter(nk + 1), leave(nk + 1);  // planned temporaries' arena tops
  for (const Buffer& b : p.buffers) {
    if (b.kind != BufferKind::Temp && b.kind != BufferKind::Output) continue;
    const Life& l = life[size_t(b.id)];
    if (l.first < 0 || l.last < l.first || size_t(l.first) >= nk) continue;
    const size_t first = size_t(l.first), end = std::min(nk, size_t(l.last) + 1);
    if (b.kind == BufferKind::Temp && p.planned) {  // counted through the arena: its top in use
      enter[first].push_back(b.arena_offset + b.bytes());
      leave[end].push_back(b.arena_offset + b.bytes());
      continue;
    }
    delta[first] += b.bytes();
    delta[end] -= b.bytes();
  }
  int64_t peak = 0, live = 0;
  std::multiset<int64_t> tops;
  for (size_t k = 0; k < nk; ++k) {
    live += delta[k];
    for (int64_t t : leave[k]) tops.erase(tops.find(t));
    for (int64_t t : enter[k]) tops.insert(t);
    peak = std::max(peak, live + (tops.empty() ? 0 : *tops.rbegin()));
  }
  p.peak_bytes = peak;
}

// Whether every load of buffer `from` in reduction kernel k feeds only its reductions: then
// the backends read it in the passes over each row, before the row's per-row stores. Every use
// of the load must end in a reduction, through elementwise work: a value on the way that is
// also stored, or read by work after the reductions, is computed again in the last pass, which
// reads `from` again after the per-row stores. (Softmax, log_softmax and cumsum do not count as
// reductions: their results are rows, computed in the last pass.)
bool read_only_by_reductions(const Kernel& k, int from) {
  auto reduces = [](const ir::Node* n) {
    return ir::op_info(n->op).category == ir::Category::Reduction && !ir::has_trait(n->op, ir::kRowOp);
  };
  std::map<const ir::Value*, std::vector<const ir::Node*>> users;
  for (const auto& n : k.body.nodes())
    for (const ir::Value* v : n->inputs) users[v].push_back(n.get());
  std::set<const ir::Value*> outputs(k.body.outputs().begin(), k.body.outputs().end());
  std::map<const ir::Value*, bool> memo;
  std::function<bool(const ir::Value*)> only_reduced = [&](const ir::Value* v) {
    if (auto it = memo.find(v); it != memo.end()) return it->second;
    bool ok = !outputs.count(v);
    for (const ir::Node* n : users[v]) {
      if (!ok) break;
      if (reduces(n)) continue;
      for (const ir::Value* o : n->outputs) ok = ok && only_reduced(o);
    }
    return memo[v] = ok;
  };
  for (size_t j = 0; j < k.loads.size(); ++j)
    if (k.loads[j].buffer == from && !only_reduced(k.body.inputs()[j])) return false;
  return true;
}

// Whether kernel `k` reads `from` and writes `to` only through one and the same index, and
// every read of an element comes before the write of it: for a reduction kernel's per-row store
// into `to` when only the reductions read `from` (its passes over the row come first), not when
// the work after the reductions reads it. For an elementwise kernel the store into `to` must be
// its last. (That rule dates from when the backends loaded an operand as each store needed it,
// store by store; they now compute a group's values before its stores, so it is stricter than
// the backends need. It is kept as a margin.)
bool in_place_pair(const Kernel& k, int from, int to, const KernelProgram& p) {
  if (k.stores.empty()) return false;
  if (k.kind == KernelKind::Elementwise) {
    if (k.stores.back().buffer != to) return false;
  } else if (k.kind == KernelKind::Reduction || k.kind == KernelKind::RowWise) {
    for (const Access& a : k.stores) {
      if (a.buffer != to) continue;
      for (size_t d = size_t(std::max(k.reduce_from, 0)); d < a.sizes.size(); ++d)
        if (a.sizes[d] != 1) return false;  // (an in-row store: written in the last pass)
    }
    if (!read_only_by_reductions(k, from)) return false;
  }
  const Access* r = nullptr;
  const Access* w = nullptr;
  for (const Access& a : k.loads)
    if (a.buffer == from) {
      if (r && !(*r == a)) return false;
      r = &a;
    }
  for (const Access& a : k.stores)
    if (a.buffer == to) {
      if (w && !(*w == a)) return false;
      w = &a;
    }
  if (!r || !w || k.kind == KernelKind::Opaque || k.kind == KernelKind::Control) return false;
  if (itemsize(p.buffers[size_t(from)].dtype) != itemsize(p.buffers[size_t(to)].dtype)) return false;
  // A store broadcast along a loop (a value over a smaller shape, fused into a kernel over a
  // larger one, written once per broadcast element) writes each element several times: a later
  // visit would read what an earlier one wrote in place (an optimizer's bias update fused into
  // its weight's update read its new moments back as garbage).
  // (a reduction's per-row store, one per row after its passes, is the case above)
  const size_t kept = k.kind == KernelKind::Elementwise ? k.loops.size() : size_t(std::max(k.reduce_from, 0));
  for (size_t d = 0; d < kept && d < k.loops.size(); ++d)
    if (k.loops[d] > 1 && (d >= w->sizes.size() || w->sizes[d] == 1 || w->strides[d] == 0)) return false;
  Access rs = *r;
  rs.buffer = w->buffer;
  return rs.same_index(*w) && !r->storage_relative;
}

}  // namespace

int64_t Buffer::bytes() const { return numel * itemsize(dtype); }

void plan_without_reuse(KernelProgram& p) {
  int64_t off = 0;
  for (Buffer& b : p.buffers)
    if (b.kind == BufferKind::Temp) {
      b.arena_offset = off;
      off += round_up(b.bytes());
    }
  p.arena_bytes = off;
  p.planned = false;
  compute_peak(p, lifetimes(p));
}

void plan_memory_of(KernelProgram& p) {
  std::vector<Life> life = lifetimes(p);
  std::map<int64_t, int64_t> free_blocks;  // offset -> bytes
  int64_t arena = 0;
  auto release = [&](int64_t off, int64_t bytes) {
    auto it = free_blocks.emplace(off, bytes).first;
    auto next = std::next(it);
    if (next != free_blocks.end() && it->first + it->second == next->first) {
      it->second += next->second;
      free_blocks.erase(next);
    }
    if (it != free_blocks.begin()) {
      auto prev = std::prev(it);
      if (prev->first + prev->second == it->first) {
        prev->second += it->second;
        free_blocks.erase(it);
      }
    }
  };
  auto take = [&](int64_t bytes) {
    auto best = free_blocks.end();
    for (auto it = free_blocks.begin(); it != free_blocks.end(); ++it)
      if (it->second >= bytes && (best == free_blocks.end() || it->second < best->second)) best = it;
    if (best == free_blocks.end()) {
      // Grow the arena, starting inside a free block that ends at its top.
      int64_t start = arena;
      if (!free_blocks.empty()) {
        auto last = std::prev(free_blocks.end());
        if (last->first + last->second == arena) {
          start = last->first;
          free_blocks.erase(last);
        }
      }
      arena = start + bytes;
      return start;
    }
    int64_t off = best->first, have = best->second;
    free_blocks.erase(best);
    if (have > bytes) free_blocks.emplace(off + bytes, have - bytes);
    return off;
  };
  // The temporaries that start and end at each kernel, in buffer order (a walk over every
  // buffer per kernel was quadratic in a long trace's program).
  std::vector<std::vector<Buffer*>> starts(p.kernels.size()), ends(p.kernels.size());
  for (Buffer& b : p.buffers) {
    b.arena_offset = b.kind == BufferKind::Temp ? -1 : b.arena_offset;
    if (b.kind != BufferKind::Temp) continue;
    const Life& l = life[size_t(b.id)];
    if (l.first >= 0 && size_t(l.first) < p.kernels.size()) starts[size_t(l.first)].push_back(&b);
    if (l.last >= 0 && size_t(l.last) < p.kernels.size()) ends[size_t(l.last)].push_back(&b);
  }
  for (size_t k = 0; k < p.kernels.size(); ++k) {
    const Kernel& kern = p.kernels[k];
    std::vector<int> handed;  // dying temporaries whose bytes a new one took in place
    for (Buffer* b : starts[k]) {
      int64_t bytes = round_up(b->bytes());
      for (const Buffer* old : ends[k]) {
        if (old->arena_offset < 0 || life[size_t(old->id)].first >= int(k) ||
            std::count(handed.begin(), handed.end(), old->id))
          continue;
        if (round_up(old->bytes()) == bytes && in_place_pair(kern, old->id, b->id, p)) {
          b->arena_offset = old->arena_offset;
          handed.push_back(old->id);
          break;
        }
      }
      if (b->arena_offset < 0) b->arena_offset = take(bytes);
    }
    for (const Buffer* b : ends[k])
      if (!std::count(handed.begin(), handed.end(), b->id)) release(b->arena_offset, round_up(b->bytes()));
  }
  p.arena_bytes = arena;
  p.planned = true;
  compute_peak(p, life);
}

int plan_memory(Module& m) {
  KILN_CHECK(m.program, "passes", "memplan: no kernel program");
  // (the plan moves buffers in the arena and sets the program's totals: nothing else)
  KernelProgram& p = *m.program;
  std::vector<int64_t> offsets;
  for (const Buffer& b : p.buffers) offsets.push_back(b.arena_offset);
  const int64_t arena = p.arena_bytes, peak = p.peak_bytes;
  const bool planned = p.planned;
  plan_memory_of(p);
  int moved = 0;
  for (size_t i = 0; i < p.buffers.size(); ++i) moved += p.buffers[i].arena_offset != offsets[i];
  return moved + (arena != p.arena_bytes || peak != p.peak_bytes || planned != p.planned);
}

}  // namespace kiln::passes
