// The process's LLVM JIT: the host target machine, the O3 pipeline with SLEEF's vector math
// functions registered as the vector forms of libm's, object files made in memory (so the
// kernel cache can keep them on disk) and ORC's LLJIT to link them into the process.
#include "jit.h"

#include <dlfcn.h>
#include <llvm/Analysis/TargetLibraryInfo.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/IR/DiagnosticHandler.h>
#include <llvm/IR/DiagnosticInfo.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/TargetParser/Host.h>

#include <algorithm>
#include <deque>
#include <atomic>
#include <mutex>
#include <set>

#include "../expr.h"
#include "kiln/runtime/error.h"

namespace kiln::codegen::cpu {

namespace {

std::string error_text(llvm::Error e) { return llvm::toString(std::move(e)); }

// The math functions kiln's kernels call (math_fns(): eops.def's math column): each gets
// SLEEF's 1-ulp vector forms (Sleef_sinf16_u10avx512f, ...) for every vector width the host
// supports, registered as the vector forms of the scalar function kernels call
// (scalar_symbol); float32 exp, erf, tanh and fmod get kiln's own (kiln_expf16, kiln_erff16,
// ...: the eager ops' functions): exp 1.3, erf 5.5 and tanh 3.4 times faster than SLEEF's, all
// within 1 ulp; fmod exact, where SLEEF 3.5.1's returns NaN for very large quotients (x = 2^110,
// y = 2^-95), so fmod has no SLEEF form here and float64 fmod stays the C library's.
// SLEEF's accuracy classes kiln takes, best first where SLEEF offers a function in several:
// 1 ulp, else 0.5 (hypot: SLEEF has no 1-ulp form of it).
constexpr const char* kSleefUlps[] = {"_u10", "_u05"};

// scalar_symbol: the name kernels call.
std::string scalar_symbol(const char* base, bool f32) {
  std::string own = "kiln_" + std::string(base) + (f32 ? "f" : "d");  // (runtime/src/cpu/vec.cpp)
  if (dlsym(RTLD_DEFAULT, own.c_str())) return own;
  for (const char* ulp : kSleefUlps) {
    std::string sleef = "Sleef_" + std::string(base) + (f32 ? "f" : "") + ulp;
    if (dlsym(RTLD_DEFAULT, sleef.c_str())) return sleef;
  }
  return std::string(base) + (f32 ? "f" : "");
}

}  // namespace

struct Jit::Impl {
  std::string triple, cpu, features, target_id;
  // The widest vectors the loop vectoriser may choose. LLVM tunes some AVX-512 CPUs (Intel's
  // server cores) to prefer 256-bit vectors, which halves the lanes of every vector math call
  // (softmax measured 1.38x faster at 512 on such a host); kiln asks for 512 bits wherever
  // AVX-512 exists.
  std::string vector_width;
  const llvm::Target* target = nullptr;
  std::unique_ptr<llvm::orc::LLJIT> jit;
  std::mutex mu;
  // Storage for the strings the vector-function table refers to.
  std::deque<std::string> names;
  std::vector<llvm::VecDesc> vec_fns;
  std::string vec_summary;

  std::unique_ptr<llvm::TargetMachine> machine() const {
    llvm::TargetOptions opts;
    auto tm = std::unique_ptr<llvm::TargetMachine>(target->createTargetMachine(
        triple, cpu, features, opts, llvm::Reloc::PIC_, std::nullopt, llvm::CodeGenOptLevel::Aggressive));
    KILN_CHECK(tm, "codegen", "cannot create an LLVM target machine for ", triple, " ", cpu);
    return tm;
  }

  // Registers SLEEF's vector forms of the math functions for the ISAs the host has, checking
  // each symbol is really in the process (a SLEEF build without it simply maps fewer).
  void map_vector_functions(const llvm::StringMap<bool>& host) {
    struct Isa {
      const char* feature;
      const char* suffix;
      int f32_lanes;
    };
    const Isa isas[] = {{"avx512f", "avx512f", 16}, {"avx2", "avx2", 8}, {"sse4.1", "sse4", 4}};
    for (const Isa& isa : isas) {
      auto it = host.find(isa.feature);
      if (it == host.end() || !it->second) continue;
      int mapped = 0;
      for (const MathFn& fn : math_fns()) {
        for (bool f32 : {true, false}) {
          int lanes = f32 ? isa.f32_lanes : isa.f32_lanes / 2;
          std::string vec;
          for (const char* ulp : kSleefUlps) {
            vec = "Sleef_" + std::string(fn.name) + (f32 ? "f" : "d") + std::to_string(lanes) + ulp + isa.suffix;
            if (dlsym(RTLD_DEFAULT, vec.c_str())) break;
          }
          // kiln's own vector form where the runtime has one for these lanes (runtime/src/cpu/vec.cpp)
          const std::string own = "kiln_" + std::string(fn.name) + (f32 ? "f" : "d") + std::to_string(lanes);
          if (dlsym(RTLD_DEFAULT, own.c_str())) vec = own, vec_summary += own + " ";
          if (!dlsym(RTLD_DEFAULT, vec.c_str())) continue;
          std::string scalar = scalar_symbol(fn.name, f32);
          std::string prefix = "_ZGV_LLVM_N" + std::to_string(lanes) + std::string(size_t(fn.arity), 'v');
          names.push_back(scalar);
          llvm::StringRef s = names.back();
          names.push_back(vec);
          llvm::StringRef v = names.back();
          names.push_back(prefix);
          llvm::StringRef p = names.back();
          vec_fns.emplace_back(s, v, llvm::ElementCount::getFixed(unsigned(lanes)), false, p);
          ++mapped;
        }
      }
      vec_summary += std::string(isa.suffix) + ":" + std::to_string(mapped) + " ";
    }
  }
};

Jit::Jit() : impl_(std::make_unique<Impl>()) {
  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
  llvm::InitializeNativeTargetAsmParser();
  Impl& s = *impl_;
  s.triple = llvm::sys::getProcessTriple();
  s.cpu = llvm::sys::getHostCPUName().str();
  llvm::StringMap<bool> host = llvm::sys::getHostCPUFeatures();
  std::vector<std::string> feats;
  for (const auto& f : host) feats.push_back((f.second ? "+" : "-") + f.first().str());
  std::sort(feats.begin(), feats.end());  // StringMap order is not stable: the key must be
  for (const std::string& f : feats) s.features += (s.features.empty() ? "" : ",") + f;
  std::string err;
  s.target = llvm::TargetRegistry::lookupTarget(s.triple, err);
  KILN_CHECK(s.target, "codegen", "no LLVM target for ", s.triple, ": ", err);
  s.map_vector_functions(host);
  auto avx512 = host.find("avx512f");
  s.vector_width = avx512 != host.end() && avx512->second ? "512" : "";
  s.target_id = s.triple + ";" + s.cpu + ";" + s.features + ";llvm " LLVM_VERSION_STRING ";vec " + s.vec_summary +
                ";width " + s.vector_width;

  auto jit = llvm::orc::LLJITBuilder().create();
  KILN_CHECK(bool(jit), "codegen", "cannot start the LLVM JIT: ", error_text(jit.takeError()));
  s.jit = std::move(*jit);
  // Kernels call libm and SLEEF: resolve them from what the process has loaded.
  auto gen = llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(s.jit->getDataLayout().getGlobalPrefix());
  KILN_CHECK(bool(gen), "codegen", "cannot search the process for symbols: ", error_text(gen.takeError()));
  s.jit->getMainJITDylib().addGenerator(std::move(*gen));
}

namespace {
// Whether the process's Jit still exists: objects released during exit, after it, leave it be.
std::atomic<bool> jit_alive{false};
}  // namespace

Jit::~Jit() { jit_alive = false; }

Jit& Jit::get() {
  static Jit jit;
  jit_alive = true;
  return jit;
}

const std::string& Jit::target_id() const { return impl_->target_id; }
std::string Jit::math_symbol(const char* base, bool f32, bool once) const {
  static const std::set<std::string> kFastLibm = {"exp", "exp2", "log", "log2", "pow"};
  if (once && kFastLibm.count(base)) return std::string(base) + (f32 ? "f" : "");
  return scalar_symbol(base, f32);
}
const std::string& Jit::cpu() const { return impl_->cpu; }

void Jit::prepare(llvm::Module& m) const {
  m.setTargetTriple(impl_->triple);
  auto tm = impl_->machine();
  m.setDataLayout(tm->createDataLayout());
  for (llvm::Function& f : m) {
    if (f.isDeclaration()) continue;
    f.addFnAttr("target-cpu", impl_->cpu);
    f.addFnAttr("target-features", impl_->features);
    if (!impl_->vector_width.empty()) f.addFnAttr("prefer-vector-width", impl_->vector_width);
  }
}

namespace {
// Drops LLVM's remarks and warnings about a kernel (an error keeps LLVM's own handling). Passes
// print some remarks unasked: the loop vectorizer always prints why it left a loop scalar when
// the loop carries a width hint (emit.cpp's float16 loops), which a user of a compiled function
// should never see on stderr.
struct QuietDiagnostics : llvm::DiagnosticHandler {
  bool handleDiagnostics(const llvm::DiagnosticInfo& d) override { return d.getSeverity() != llvm::DS_Error; }
};
}  // namespace

void Jit::optimize(llvm::Module& m) const {
  m.getContext().setDiagnosticHandler(std::make_unique<QuietDiagnostics>());
  auto tm = impl_->machine();
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PipelineTuningOptions tuning;
  tuning.LoopVectorization = true;
  tuning.SLPVectorization = true;
  tuning.LoopUnrolling = true;
  llvm::PassBuilder pb(tm.get(), tuning);
  // Registered before the defaults so that the vectoriser sees SLEEF's vector functions.
  llvm::TargetLibraryInfoImpl tlii{llvm::Triple(impl_->triple)};
  tlii.addVectorizableFunctions(impl_->vec_fns);
  fam.registerPass([&] { return llvm::TargetLibraryAnalysis(tlii); });
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  llvm::ModulePassManager mpm = pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3);
  mpm.run(m, mam);
}

namespace {
std::string emit_file(llvm::TargetMachine& tm, llvm::Module& m, llvm::CodeGenFileType type) {
  llvm::SmallVector<char, 0> buf;
  llvm::raw_svector_ostream os(buf);
  llvm::legacy::PassManager pm;
  KILN_CHECK(!tm.addPassesToEmitFile(pm, os, nullptr, type), "codegen", "the target cannot emit this file type");
  pm.run(m);
  return std::string(buf.begin(), buf.end());
}
}  // namespace

std::string Jit::object(llvm::Module& m) const {
  auto tm = impl_->machine();
  return emit_file(*tm, m, llvm::CodeGenFileType::ObjectFile);
}

std::string Jit::assembly(llvm::Module& m) const {
  auto tm = impl_->machine();
  return emit_file(*tm, m, llvm::CodeGenFileType::AssemblyFile);
}

struct Jit::Object::State {
  Jit::Impl* jit = nullptr;
  llvm::orc::ResourceTrackerSP tracker;
};

Jit::Object::~Object() {
  if (!state_ || !jit_alive) return;
  std::lock_guard<std::mutex> lock(state_->jit->mu);
  if (llvm::Error e = state_->tracker->remove()) llvm::consumeError(std::move(e));
}

void* Jit::Object::symbol(const std::string& name) const {
  std::lock_guard<std::mutex> lock(state_->jit->mu);
  auto addr = state_->jit->jit->lookup(name);
  if (!addr) KILN_FAIL("codegen", "compiled object lacks ", name, ": ", error_text(addr.takeError()));
  return addr->toPtr<void*>();
}

std::shared_ptr<Jit::Object> Jit::link(std::string_view object_bytes, const std::string& name) {
  auto obj = std::make_shared<Object>();
  obj->state_ = std::make_unique<Object::State>();
  obj->state_->jit = impl_.get();
  obj->bytes_ = object_bytes.size();
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto& jit = *impl_->jit;
  obj->state_->tracker = jit.getMainJITDylib().createResourceTracker();
  auto buf = llvm::MemoryBuffer::getMemBufferCopy(llvm::StringRef(object_bytes.data(), object_bytes.size()), name);
  if (llvm::Error e = jit.addObjectFile(obj->state_->tracker, std::move(buf)))
    KILN_FAIL("codegen", "cannot load the object code of ", name, ": ", error_text(std::move(e)));
  return obj;
}


}  // namespace kiln::codegen::cpu
