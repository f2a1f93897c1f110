// The fuzz body over a fixed corpus, for CTest: every seed file, then deterministic mutations
// of them (byte flips, overwrites, deletions, truncations, insertions of random bytes and of
// dictionary tokens, duplicated slices) from a fixed-seed generator, so that every CI run
// exercises the parser's robustness the same way without clang or libFuzzer.
//
//   ir_fuzz_corpus CORPUS_DIR DICT_FILE [MUTATIONS]
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>
#include <unistd.h>

#include "fuzz_parse.h"

namespace {

// The input being checked, printed if the process dies on a signal (a crash is a bug too).
const std::string* g_current = nullptr;
void on_signal(int sig) {
  if (g_current) {
    const char head[] = "\nir_fuzz_corpus: crashed on this input:\n";
    (void)!write(2, head, sizeof head - 1);
    (void)!write(2, g_current->data(), g_current->size());
    (void)!write(2, "\n", 1);
  }
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// libFuzzer's dictionary format: one "token" per line, with \\, \" and \xNN escapes.
std::vector<std::string> read_dict(const std::filesystem::path& p) {
  std::vector<std::string> tokens;
  std::istringstream lines(read_file(p));
  for (std::string line; std::getline(lines, line);) {
    size_t a = line.find('"'), b = line.rfind('"');
    if (line.empty() || line[0] == '#' || a == std::string::npos || b <= a) continue;
    std::string t;
    for (size_t i = a + 1; i < b; ++i) {
      if (line[i] != '\\' || i + 1 >= b) t += line[i];
      else if (line[i + 1] == 'x' && i + 3 < b) t += char(std::stoi(line.substr(i + 2, 2), nullptr, 16)), i += 3;
      else t += line[++i];
    }
    tokens.push_back(t);
  }
  return tokens;
}

// One random edit of `s`.
void mutate(std::string& s, std::mt19937_64& rng, const std::vector<std::string>& dict) {
  auto pick = [&](uint64_t n) { return n == 0 ? uint64_t(0) : rng() % n; };
  size_t pos = size_t(pick(s.size() + 1));
  switch (pick(7)) {
    case 0:  // flip one bit
      if (!s.empty()) s[pos % s.size()] = char(s[pos % s.size()] ^ (1 << pick(8)));
      break;
    case 1:  // overwrite a byte
      if (!s.empty()) s[pos % s.size()] = char(pick(256));
      break;
    case 2:  // delete a short range
      s.erase(pos, size_t(1 + pick(8)));
      break;
    case 3:  // truncate
      s.resize(pos);
      break;
    case 4:  // insert random bytes
      s.insert(pos, std::string(size_t(1 + pick(4)), char(pick(256))));
      break;
    case 5:  // insert a dictionary token
      if (!dict.empty()) s.insert(pos, dict[size_t(pick(dict.size()))]);
      break;
    default: {  // copy a slice elsewhere (repeats lines, nests braces)
      size_t from = size_t(pick(s.size() + 1)), len = size_t(pick(64));
      s.insert(pos, s.substr(from, len));
      break;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR DICT_FILE [MUTATIONS]\n", argv[0]);
    return 2;
  }
  for (int sig : {SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL}) std::signal(sig, on_signal);
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
    g_current = &s;
    counts[int(kiln::fuzz::parse_one(reinterpret_cast<const uint8_t*>(s.data()), s.size()))]++;
    g_current = nullptr;
  };
  for (size_t i = 0; i < seeds.size(); ++i) {
    run(seeds[i]);
    if (counts[2] != int(i) + 1) {
      std::fprintf(stderr, "seed %s does not parse and verify\n", files[i].c_str());
      return 1;
    }
  }
  std::mt19937_64 rng(0x6b696c6e);  // "kiln": the same mutations on every run and machine
  for (long i = 0; i < mutations; ++i) {
    std::string s = seeds[size_t(rng() % seeds.size())];
    // mostly one edit, so that many mutants still parse and reach the verifier
    for (uint64_t k = rng() % 3 ? 1 : 2 + rng() % 4; k-- > 0;) mutate(s, rng, dict);
    run(s);
  }
  std::printf("%zu seeds, %ld mutations: %d rejected, %d parsed but failed verify, %d verified\n", seeds.size(),
              mutations, counts[0], counts[1], counts[2]);
  return 0;
}
