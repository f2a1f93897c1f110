// The fuzz body over a fixed corpus, for CTest: every seed file, then deterministic mutations
// of them (byte flips, overwrites, deletions, truncations, insertions of random bytes and of
// dictionary tokens, duplicated slices) from a fixed-seed generator, so that every CI run
// exercises the parser's robustness the same way without clang or libFuzzer.
//
//   ir_fuzz_corpus CORPUS_DIR DICT_FILE [MUTATIONS]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "fuzz_parse.h"
#include "mutate.h"

using namespace kiln::fuzz;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR DICT_FILE [MUTATIONS]\n", argv[0]);
    return 2;
  }
  install_crash_report("ir_fuzz_corpus");
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(argv[1]))
    if (e.path().extension() == ".ir") files.push_back(e.path());
  std::sort(files.begin(), files.end());  // directory order is not stable; the run must be
  if (files.empty()) {
    std::fprintf(stderr, "no .ir files in %s\n", argv[1]);
    return 2;
  }
  std::vector<std::string> seeds, dict = read_dict(argv[2]);
  for (const auto& f : files) seeds.push_back(read_file(f));
  const long mutations = argc > 3 ? std::atol(argv[3]) : 4000;

  int counts[3] = {0, 0, 0};
  auto run = [&](const std::string& s) {
    current_input() = &s;
    counts[int(kiln::fuzz::parse_one(reinterpret_cast<const uint8_t*>(s.data()), s.size()))]++;
    current_input() = nullptr;
  };
  for (size_t i = 0; i < seeds.size(); ++i) {
    run(seeds[i]);
    if (counts[2] != int(i) + 1) {
      std::fprintf(stderr, "seed %s does not parse and verify\n", files[i].c_str());
      return 1;
    }
  }
  std::mt19937_64 rng(kMutationSeed);
  for (long i = 0; i < mutations; ++i) run(mutant(seeds, rng, dict));
  std::printf("%zu seeds, %ld mutations: %d rejected, %d parsed but failed verify, %d verified\n", seeds.size(),
              mutations, counts[0], counts[1], counts[2]);
  return 0;
}
