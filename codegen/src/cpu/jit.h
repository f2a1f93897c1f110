// The process's LLVM JIT (internal to codegen/cpu): host target, O3 with the vector math
// library, object files in memory, ORC to load them.
#pragma once
#include <memory>
#include <string>
#include <string_view>

namespace llvm {
class Module;
}

namespace kiln::codegen::cpu {

class Jit {
 public:
  // The one JIT of the process (created on first use; thread-safe).
  static Jit& get();

  // What compiled code depends on besides its IR: target triple, CPU, features, LLVM version,
  // the vector functions mapped. Part of every cache key.
  const std::string& target_id() const;
  // The host CPU name (e.g. znver4) and whether it has AVX-512.
  const std::string& cpu() const;

  // The scalar function a kernel calls for a math function ("sin", float32 or float64):
  // SLEEF's scalar 1-ulp form (Sleef_sinf_u10) when the process has it, so that an element's
  // result does not depend on whether it falls in the vector body or the scalar remainder;
  // libm's (sinf) otherwise. Its vector forms are registered for the vectoriser under this name.
  // `once`: the call runs once per row, never in a vector loop (a row-wise kernel's per-row
  // values: log_softmax's log of the row's sum); then glibc's exp, exp2, log, log2 and pow,
  // which are within 1 ulp as SLEEF's are but 2-5x faster as scalar calls (9-15 against
  // 22-72 ns a call, measured on the development host).
  std::string math_symbol(const char* base, bool f32, bool once = false) const;

  // Runs the O3 pipeline (vectorisers on, libm calls mapped to SLEEF's vector functions).
  void optimize(llvm::Module& m) const;
  // The module (already optimised) as an object file, or as assembly text.
  std::string object(llvm::Module& m) const;
  std::string assembly(llvm::Module& m) const;
  // Sets the module's triple, data layout and the functions' target-cpu/features attributes.
  void prepare(llvm::Module& m) const;

  // An object file linked into the process for as long as the handle lives: its symbols are
  // callable until the last handle goes, which unlinks its code (the memory cache of compiled
  // kernels bounds what it keeps this way). An object's symbols must not be linked twice at once.
  class Object {
   public:
    ~Object();
    void* symbol(const std::string& name) const;  // throws kiln::Error when absent
    size_t bytes() const { return bytes_; }

   private:
    friend class Jit;
    struct State;
    std::unique_ptr<State> state_;
    size_t bytes_ = 0;
  };
  std::shared_ptr<Object> link(std::string_view object_bytes, const std::string& name);

  ~Jit();

 private:
  Jit();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::codegen::cpu
