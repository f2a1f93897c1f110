// dump-ir, run as a program: its JSON output parses and holds graphs that load and verify, for
// every workload; DOT output is well formed; graph files convert between the text form and
// JSON; every error is one line on stderr with the documented exit status.
#include <gtest/gtest.h>
#include <kiln/codegen/cpu.h>
#include <kiln/ir/graph.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "../common/nvrtc.h"
#include "workloads.h"

using nlohmann::json;
namespace wl = kiln::workloads;

namespace {

struct Result {
  int status = -1;
  std::string out;
};

// Runs dump-ir with `args` (shell syntax); `stream` 1 captures stdout, 2 stderr (stdout dropped);
// `env`: a command to run it under (env's settings).
Result dump_ir(const std::string& args, int stream = 1, const std::string& env = "") {
  std::string cmd = env + (env.empty() ? "" : " ") + "'" + KILN_DUMP_IR + "' " + args +
                    (stream == 1 ? " 2>/dev/null" : " 2>&1 >/dev/null");
  Result r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
  return r;
}

std::string data(const std::string& file) { return std::string(KILN_TOOLS_DATA) + "/" + file; }

std::string read(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Braces balance outside double-quoted strings.
bool balanced(const std::string& s) {
  int depth = 0;
  bool quoted = false;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (quoted) {
      if (c == '\\') ++i;
      else if (c == '"') quoted = false;
    } else if (c == '"') {
      quoted = true;
    } else if (c == '{') {
      ++depth;
    } else if (c == '}') {
      if (--depth < 0) return false;
    }
  }
  return depth == 0 && !quoted;
}

size_t count_lines(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

// What `dump-ir FILE` prints for a file holding `graphs`: each graph's text form, after a
// "// graph I of N" line when there are several.
std::string listing(const std::vector<kiln::ir::Graph>& graphs) {
  std::string s;
  for (size_t i = 0; i < graphs.size(); ++i) {
    if (graphs.size() > 1) s += "// graph " + std::to_string(i) + " of " + std::to_string(graphs.size()) + "\n";
    s += kiln::ir::print(graphs[i]);
  }
  return s;
}

}  // namespace

TEST(DumpIr, JsonOutputOfEveryWorkloadLoadsAndVerifies) {
  for (const wl::Workload& w : wl::all_workloads()) {
    Result r = dump_ir(w.name + " --format json --explain --run");
    ASSERT_EQ(r.status, 0) << w.name;
    json doc;
    ASSERT_NO_THROW(doc = json::parse(r.out)) << w.name << "\n" << r.out;
    EXPECT_EQ(doc.at("workload"), w.name);
    EXPECT_EQ(doc.at("inputs").size(), w.inputs.size()) << w.name;
    const json& graphs = doc.at("graphs");
    EXPECT_EQ(graphs.size(), size_t(w.paths == 1 ? 1 : 1 + w.paths)) << w.name;
    for (const json& g : graphs) {
      kiln::ir::Graph graph = kiln::ir::from_json(g.dump());
      auto err = kiln::ir::verify(graph);
      EXPECT_FALSE(err.has_value()) << w.name << ": " << (err ? err->str() : "");
    }
    const json& ex = doc.at("explain");
    EXPECT_EQ(ex.at("breaks").size(), w.paths == 1 ? 0u : 1u) << w.name;
    EXPECT_GE(ex.at("stats").at("compiles").get<int>(), 1) << w.name;
    EXPECT_FALSE(doc.at("outputs").empty()) << w.name;
  }
}

TEST(DumpIr, DotAndTextOutputOfEveryWorkload) {
  for (const wl::Workload& w : wl::all_workloads()) {
    Result dot = dump_ir(w.name + " --format dot");
    ASSERT_EQ(dot.status, 0) << w.name;
    EXPECT_NE(dot.out.find("digraph \""), std::string::npos) << w.name;
    EXPECT_TRUE(balanced(dot.out)) << w.name << "\n" << dot.out;
    Result text = dump_ir(w.name);
    ASSERT_EQ(text.status, 0) << w.name;
    if (w.paths == 1) {
      // one graph: the output (comments included) is a loadable graph file
      EXPECT_NO_THROW(kiln::ir::parse(text.out)) << w.name << "\n" << text.out;
    }
  }
}

// The CPU kernels' thread plan (--emit=code) under OpenMP's wait policies: poly over 2^17
// elements (cost 1) goes threaded at the default threshold of 2^15 units of work, and stays on
// one thread under OMP_WAIT_POLICY=PASSIVE, whose threshold is 64 times higher (waking a
// sleeping thread costs more than the kernel takes). (The test binaries pin the threshold:
// thread_coverage.cpp; these children run without it.)
TEST(DumpIr, ThreadPlanFollowsTheWaitPolicy) {
  auto run = [](const std::string& policy) {
    return dump_ir("poly --input x=131072 --emit=code", 1,
                   "env -u KILN_CPU_THREAD_MIN_WORK OMP_WAIT_POLICY=" + policy + " KILN_NUM_THREADS=2");
  };
  Result active = run("ACTIVE"), passive = run("passive");
  ASSERT_EQ(active.status, 0);
  ASSERT_EQ(passive.status, 0);
  EXPECT_NE(active.out.find("threads: 2 over loop"), std::string::npos) << active.out;
  EXPECT_NE(passive.out.find("threads: 1 (131072 elements at cost 1: under 2097152 of work)"), std::string::npos)
      << passive.out;
}

// -O --run checks the kernel program on the interpreter and, where kiln has its LLVM backend,
// compiled for the CPU (what kiln::compile runs), each output against the reference executor.
TEST(DumpIr, RunChecksTheCompiledProgramToo) {
  Result r = dump_ir("'" + data("small.ir") + "' -O --run");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("// check output 1: f32[3, 4] max abs diff"), std::string::npos) << r.out;
  const bool compiled = r.out.find("// check compiled output 1: f32[3, 4] max abs diff") != std::string::npos;
  EXPECT_EQ(compiled, kiln::codegen::has_cpu_codegen()) << r.out;
  if (compiled) {
    EXPECT_NE(r.out.find("// check compiled output 0: f32[4] max abs diff"), std::string::npos) << r.out;
  }
  EXPECT_EQ(r.out.find("MISMATCH"), std::string::npos) << r.out;
}

// --emit=cuda renders without a GPU or NVRTC; --emit=ptx compiles the same kernels with NVRTC
// (no GPU needed) for --arch, one entry per kernel, under the same header.
TEST(DumpIr, EmitsCudaAndPtxForAnArchitecture) {
  Result cu = dump_ir("layernorm --emit=cuda");
  ASSERT_EQ(cu.status, 0) << cu.out;
  EXPECT_NE(cu.out.find("// workload layernorm (small)"), std::string::npos) << cu.out;
  EXPECT_NE(cu.out.find("extern \"C\" __global__"), std::string::npos) << cu.out;
  KILN_NEEDS_NVRTC();
  for (const char* arch : {"90", "80"}) {
    Result ptx = dump_ir(std::string("layernorm --emit=ptx --arch ") + arch);
    ASSERT_EQ(ptx.status, 0) << ptx.out;
    EXPECT_NE(ptx.out.find("// workload layernorm (small)"), std::string::npos) << ptx.out.substr(0, 2000);
    EXPECT_NE(ptx.out.find(std::string(".target sm_") + arch), std::string::npos) << ptx.out.substr(0, 2000);
    EXPECT_NE(ptx.out.find(".visible .entry kiln_k0("), std::string::npos) << ptx.out.substr(0, 2000);
  }
}

TEST(DumpIr, BranchSignExplainShowsBothPaths) {
  Result r = dump_ir("branch_sign --explain");
  ASSERT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("3 graphs, 1 graph break"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("value in {true, false}"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("guard failed"), std::string::npos) << r.out;
}

TEST(DumpIr, ListAsJson) {
  Result r = dump_ir("--list --format json");
  ASSERT_EQ(r.status, 0);
  json list = json::parse(r.out);
  ASSERT_EQ(list.size(), wl::all_workloads().size());
  EXPECT_EQ(list[0].at("name"), "add_sin_cos");
  EXPECT_EQ(list[0].at("inputs")[0].at("sizes").at("small"), json::array({1000}));
}

TEST(DumpIr, GraphFileRoundTripsThroughJson) {
  Result text = dump_ir("'" + data("small.ir") + "'");
  ASSERT_EQ(text.status, 0);
  EXPECT_EQ(text.out, kiln::ir::print(kiln::ir::parse(read(data("small.ir")))));
  Result js = dump_ir("'" + data("small.ir") + "' --format json");
  ASSERT_EQ(js.status, 0);
  kiln::ir::Graph g = kiln::ir::from_json(js.out);
  EXPECT_EQ(kiln::ir::print(g), text.out);
  std::string tmp = testing::TempDir() + "dump_ir_small.json";
  std::ofstream(tmp) << js.out;
  Result back = dump_ir("'" + tmp + "'");
  ASSERT_EQ(back.status, 0);
  EXPECT_EQ(back.out, text.out);
  Result run = dump_ir("'" + tmp + "' --run");
  ASSERT_EQ(run.status, 0);
  EXPECT_NE(run.out.find("// output 0: f32[4] = tensor("), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("// output 1: f32[3, 4] = tensor("), std::string::npos) << run.out;
  Result run_json = dump_ir("'" + data("small.ir") + "' --run --format json");
  ASSERT_EQ(run_json.status, 0);
  json doc = json::parse(run_json.out);
  EXPECT_EQ(doc.at("outputs").size(), 2u);
  EXPECT_EQ(doc.at("outputs")[1].at("values").size(), 12u);
}

// Whatever dump-ir writes as text or JSON loads back into it, every graph of it: each
// workload's traced graphs (three for branch_sign, whose trace breaks) and its optimized ones
// (-O), in both forms; the output of the flags that add to it (--explain, --run, --stats,
// --time-passes); and a file of several graphs, converted, run and optimized. dump-ir's own
// multi-graph text and its JSON documents did not load back.
TEST(DumpIr, EveryOutputLoadsBack) {
  const std::string dir = testing::TempDir();
  int files = 0;
  // Writes `out` to a file and loads it back: dump-ir must print `want`.
  auto loads_back = [&](const std::string& out, bool as_json, const std::string& want, const std::string& what) {
    const std::string file = dir + "dump_ir_back_" + std::to_string(files++) + (as_json ? ".json" : ".ir");
    std::ofstream(file) << out;
    Result back = dump_ir("'" + file + "'");
    EXPECT_EQ(back.status, 0) << what << ": " << dump_ir("'" + file + "'", 2).out;
    EXPECT_EQ(back.out, want) << what << "\n" << out.substr(0, 3000);
  };
  auto graphs_of = [](const std::string& json_out, const std::string& what) {
    std::vector<kiln::ir::Graph> graphs;
    try {
      graphs = kiln::ir::graphs_from_json(json_out);
    } catch (const kiln::Error& e) {
      ADD_FAILURE() << what << ": " << e.what();
    }
    return graphs;
  };
  for (const wl::Workload& w : wl::all_workloads()) {
    for (const std::string opt : {"", " -O"}) {
      const std::string target = w.name + opt;
      Result js = dump_ir(target + " --format json");
      ASSERT_EQ(js.status, 0) << target;
      std::vector<kiln::ir::Graph> graphs = graphs_of(js.out, target);
      EXPECT_EQ(graphs.size(), size_t(w.paths == 1 ? 1 : 1 + w.paths)) << target;
      const std::string want = listing(graphs);
      Result text = dump_ir(target);
      ASSERT_EQ(text.status, 0) << target;
      loads_back(js.out, true, want, target + " --format json");
      loads_back(text.out, false, want, target);
    }
  }

  const std::string traced = listing(graphs_of(dump_ir("branch_sign --format json").out, "branch_sign"));
  const std::string optimized = listing(graphs_of(dump_ir("branch_sign -O --format json").out, "branch_sign -O"));
  ASSERT_NE(traced.find("// graph 2 of 3\n"), std::string::npos) << traced;
  for (const auto& [flags, want] : std::vector<std::pair<std::string, std::string>>{
           {" --explain --run", traced}, {" -O --explain --run --stats --time-passes", optimized}})
    for (bool as_json : {false, true}) {
      const std::string what = "branch_sign" + flags + (as_json ? " --format json" : "");
      Result out = dump_ir(what);
      ASSERT_EQ(out.status, 0) << what;
      loads_back(out.out, as_json, want, what);
    }

  // a file of several graphs stays several through every form dump-ir writes it in
  const std::string three = dir + "dump_ir_three.ir";
  std::ofstream(three) << dump_ir("branch_sign").out;
  Result as_file = dump_ir("'" + three + "'");
  ASSERT_EQ(as_file.status, 0) << dump_ir("'" + three + "'", 2).out;
  EXPECT_EQ(as_file.out, traced);
  for (const std::string flags : {" --format json", " --run --format json", " --explain --run", " --explain --run --format dot"}) {
    const bool dot = flags.find("dot") != std::string::npos, as_json = flags.find("json") != std::string::npos;
    Result out = dump_ir("'" + three + "'" + flags);
    ASSERT_EQ(out.status, 0) << flags << ": " << dump_ir("'" + three + "'" + flags, 2).out;
    if (dot) {  // (for Graphviz, not for loading back: one digraph per graph)
      size_t digraphs = 0;
      for (size_t at = out.out.find("digraph \""); at != std::string::npos; at = out.out.find("digraph \"", at + 1)) ++digraphs;
      EXPECT_EQ(digraphs, 3u) << out.out;
      continue;
    }
    loads_back(out.out, as_json, traced, "branch_sign's graphs as a file," + flags);
  }
  Result file_opt = dump_ir("'" + three + "' -O --run --format json");
  ASSERT_EQ(file_opt.status, 0) << dump_ir("'" + three + "' -O --run --format json", 2).out;
  std::vector<kiln::ir::Graph> file_optimized = graphs_of(file_opt.out, "the file -O");
  EXPECT_EQ(file_optimized.size(), 3u);
  EXPECT_EQ(listing(file_optimized), optimized);
  EXPECT_EQ(json::parse(file_opt.out).at("optimized").size(), 3u);
  loads_back(file_opt.out, true, optimized, "branch_sign's graphs as a file, -O --run --format json");
  Result file_opt_text = dump_ir("'" + three + "' -O --run --stats");
  ASSERT_EQ(file_opt_text.status, 0);
  loads_back(file_opt_text.out, false, optimized, "branch_sign's graphs as a file, -O --run --stats");
}

// A JSON graph file's errors name the file and, for malformed JSON (1e999 overflows a double:
// nlohmann threw its own exception for it, which dump-ir reported without the file), the line
// and column. A graph name the text form cannot write is refused rather than printed.
TEST(DumpIr, JsonErrorsSayWhereAndWhat) {
  const std::string dir = testing::TempDir();
  struct Case {
    std::string file, content, expect;
  };
  const std::vector<Case> cases = {
      {"dump_ir_overflow.json", "{\n  \"graph\": \"g\",\n  \"inputs\": [1e999]\n}\n",
       "dump_ir_overflow.json:3:14: malformed JSON: number overflow parsing '1e999'"},
      {"dump_ir_bad_name.json",
       R"({"graph": "a b", "inputs": [{"name": "x", "type": "f32[2]{1}"}], "nodes": [], "outputs": ["%x"]})",
       "dump_ir_bad_name.json: graph name 'a b' cannot be written in the text form"},
      {"dump_ir_int_attr.json",
       R"({"graph": "g", "inputs": [{"name": "x", "type": "f32[2]{1}"}], "nodes": [{"op": "mul", "inputs": ["%x", "%x"],
          "attrs": [{"name": "v", "kind": "int", "value": 2.5}], "outputs": ["f32[2]{1}"]}], "outputs": ["%0"]})",
       "dump_ir_int_attr.json: graph: node 0 (mul): attribute 'v': \"value\": expected an integer, found the number 2.5"},
      {"dump_ir_no_graph.ir", "// only a comment\n", "dump_ir_no_graph.ir: no graph in the file"},
      {"dump_ir_second_bad.ir",
       "graph @a(%x: f32[2]{1}) {\n  return %x\n}\ngraph @b(%x: f32[2]{1}) {\n  %0 = nope(%x) : f32[2]{1}\n  return %0\n}\n",
       "dump_ir_second_bad.ir:5:8: unknown op 'nope'"},
  };
  for (const Case& c : cases) {
    const std::string path = dir + c.file;
    std::ofstream(path) << c.content;
    Result r = dump_ir("'" + path + "'", 2);
    EXPECT_EQ(r.status, 1) << c.file << "\n" << r.out;
    EXPECT_EQ(count_lines(r.out), 1u) << r.out;
    EXPECT_EQ(r.out.rfind("dump-ir: error: ", 0), 0u) << r.out;
    EXPECT_NE(r.out.find(c.expect), std::string::npos) << r.out;
  }
}

// The reference executor and the kernel program agree on a cond whose branch returns its
// operand, written through afterwards (docs/passes.md, "Writes and the IR"): the reference
// executor handed back the operand itself, so the write reached it there only.
TEST(DumpIr, CondResultsAgreeWithTheKernelProgram) {
  Result r = dump_ir("'" + data("cond_result_aliases_operand.ir") + "' -O --run");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out.find("MISMATCH"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("// check output 0: f32[4] max abs diff 0 "), std::string::npos) << r.out;
}

TEST(DumpIr, ErrorsAreOneLineWithTheDocumentedStatus) {
  struct Case {
    std::string args;
    int status;
    std::string expect;  // in the message
  };
  const std::vector<Case> cases = {
      {"nope", 1, "dump-ir: error: unknown workload 'nope' (see --list)"},
      {"'" + data("does_not_exist.ir") + "'", 1, "does_not_exist.ir: no such file"},
      {"'" + data("malformed.ir") + "'", 1, "malformed.ir:3:15: expected ')'"},
      {"'" + data("unknown_op.ir") + "'", 1, "unknown_op.ir:2:8: unknown op 'frobnicate'"},
      {"'" + data("bad_type.ir") + "'", 1, "bad_type.ir:3:3: node 1 (%1 = mul): declared f64[4]{1} but inferred"},
      {"'" + data("huge_type.ir") + "' --run", 1,
       "huge_type.ir:3:17: malformed type: sizes [4611686018427387905] and strides {1} of f32 reach more bytes"},
      {"add_sin_cos --input a=4611686018427387905 --input b=4611686018427387905 --run", 1,
       "sizes [4611686018427387905] hold 4611686018427387905 elements of 4 bytes"},
      {"'" + data("malformed.json") + "'", 1, "malformed.json:5:3: malformed JSON"},
      {"add_sin_cos --input c=10", 1, "workload 'add_sin_cos' has no input 'c' (its inputs: a, b)"},
      {"add_sin_cos --input a=10xq", 1, "bad size 'q'"},
      {"add_sin_cos --input a=-3", 1, "bad size '-3'"},
      {"add_sin_cos --input a=10:f17", 1, "unknown dtype 'f17'"},
      {"add_sin_cos --input a", 1, "expected NAME=SIZES[:DTYPE]"},
      {"add_sin_cos --dtype q8", 1, "unknown dtype 'q8'"},
      {"add_sin_cos --input a=12", 1, "add_sin_cos: [mul] The size of tensor a (12) must match"},
      {"add_sin_cos --size huge", 2, "--size"},
      {"add_sin_cos --format yaml", 2, "--format"},
      {"--no-such-flag", 2, "--no-such-flag"},
      {"", 2, "give a workload name"},
      {"'" + data("small.ir") + "' --size bench", 2, "apply to workloads"},
  };
  for (const Case& c : cases) {
    Result r = dump_ir(c.args, 2);
    EXPECT_EQ(r.status, c.status) << c.args << "\n" << r.out;
    EXPECT_EQ(count_lines(r.out), 1u) << c.args << "\n" << r.out;
    EXPECT_EQ(r.out.rfind("dump-ir: error: ", 0), 0u) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.expect), std::string::npos) << c.args << "\n" << r.out;
    EXPECT_EQ(r.out.find("terminate"), std::string::npos) << r.out;
  }
}

// Inside every cluster (a region of a cond), edges join nodes of that region only: Graphviz
// moves a node into the first cluster that names it, so an outer node named inside one would
// be drawn there.
TEST(DumpIr, DotClustersHoldOnlyTheirRegion) {
  for (const char* file : {"small.ir", "nested_cond.ir"}) {
    Result r = dump_ir("'" + data(file) + "' --format dot");
    ASSERT_EQ(r.status, 0) << file;
    EXPECT_TRUE(balanced(r.out)) << r.out;
    std::istringstream in(r.out);
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    int clusters = 0;
    for (size_t i = 0; i < lines.size(); ++i) {
      size_t indent = lines[i].find("subgraph cluster_");
      if (indent == std::string::npos) continue;
      ++clusters;
      std::string prefix;  // the region's id prefix, from its first node line ("n0r1_in0 [")
      const std::string close = std::string(indent, ' ') + "}";
      for (size_t j = i + 1; j < lines.size() && lines[j] != close; ++j) {
        const std::string& l = lines[j];
        size_t start = l.find_first_not_of(' ');
        if (prefix.empty() && l.find(" [shape=") != std::string::npos)
          prefix = l.substr(start, l.find("in0") - start);
        size_t arrow = l.find(" -> ");
        if (arrow == std::string::npos) continue;
        std::string from = l.substr(start, arrow - start);
        std::string to = l.substr(arrow + 4, l.find_first_of(" ;", arrow + 4) - arrow - 4);
        EXPECT_EQ(from.rfind(prefix, 0), 0u) << file << ": " << l << " in the cluster of " << prefix;
        EXPECT_EQ(to.rfind(prefix, 0), 0u) << file << ": " << l << " in the cluster of " << prefix;
      }
      EXPECT_FALSE(prefix.empty()) << file;
    }
    EXPECT_EQ(clusters, std::string(file) == "small.ir" ? 2 : 4) << r.out;
  }
}

TEST(DumpIr, HelpDocumentsTheOptions) {
  Result r = dump_ir("--help");
  ASSERT_EQ(r.status, 0);
  for (const char* opt : {"--list", "--size", "--input", "--dtype", "--format", "--explain", "--run", "--seed",
                          "Examples:", "Exit status"})
    EXPECT_NE(r.out.find(opt), std::string::npos) << opt;
}
