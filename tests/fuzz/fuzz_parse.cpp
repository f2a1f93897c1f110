// libFuzzer target for the IR text parser (built with -DKILN_FUZZ=ON and clang; see
// tests/fuzz/CMakeLists.txt), and the fuzz body it shares with the corpus runner.
//
//   build-fuzz/tests/fuzz/fuzz_parse -dict=tests/fuzz/ir.dict -max_total_time=60 fuzz-corpus tests/fuzz/corpus
#include "fuzz_parse.h"

#include <kiln/ir/graph.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>
#include <string_view>

namespace kiln::fuzz {

namespace {

[[noreturn]] void bug(std::string_view input, const std::string& what) {
  std::fprintf(stderr, "fuzz_parse: BUG: %s\n--- input (%zu bytes) ---\n%.*s\n--- end of input ---\n", what.c_str(),
               input.size(), int(input.size()), input.data());
  std::abort();
}

Outcome check(std::string_view text) {
  std::optional<ir::Graph> g;
  try {
    g.emplace(ir::parse(text));
  } catch (const Error&) {
    return Outcome::Rejected;  // any malformed text may be refused, with a line:column error
  }
  // print -> parse -> print is the identity on printed text, and keeps the hash
  std::string printed = ir::print(*g);
  std::optional<ir::Graph> back;
  try {
    back.emplace(ir::parse(printed));
  } catch (const Error& e) {
    bug(text, std::string("the printed form does not parse: ") + e.what() + "\n--- printed ---\n" + printed);
  }
  if (ir::print(*back) != printed) bug(text, "print(parse(print(g))) != print(g):\n" + printed + "---\n" + ir::print(*back));
  if (ir::hash(*back) != ir::hash(*g)) bug(text, "the hash changed across a round trip");
  // the JSON form round-trips too (it may refuse strings that are not UTF-8, with a kiln::Error)
  std::optional<std::string> js;
  try {
    js = ir::to_json(*g);
  } catch (const Error&) {
  }
  if (js) {
    try {
      if (ir::print(ir::from_json(*js)) != printed) bug(text, "the JSON round trip changed the graph:\n" + *js);
    } catch (const Error& e) {
      bug(text, std::string("the JSON form does not read back: ") + e.what() + "\n" + *js);
    }
  }
  // verify reports problems; it never throws
  return ir::verify(*g) ? Outcome::Parsed : Outcome::Verified;
}

}  // namespace

Outcome parse_one(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    return check(text);
  } catch (const std::exception& e) {
    bug(text, std::string("unexpected exception: ") + e.what());
  } catch (...) {
    bug(text, "unexpected exception of an unknown type");
  }
}

}  // namespace kiln::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kiln::fuzz::parse_one(data, size);
  return 0;
}
