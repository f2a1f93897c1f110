// The corpus runners' inputs: files, libFuzzer's dictionary format, and one random edit of a
// text (shared by ir_fuzz_corpus and the pipeline fuzz test).
#pragma once
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace kiln::fuzz {

inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// libFuzzer's dictionary format: one "token" per line, with \\, \" and \xNN escapes.
inline std::vector<std::string> read_dict(const std::filesystem::path& p) {
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
inline void mutate(std::string& s, std::mt19937_64& rng, const std::vector<std::string>& dict) {
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

// A mutant of a random seed: mostly one edit, so that many mutants still parse and reach the
// verifier, else two to five.
inline std::string mutant(const std::vector<std::string>& seeds, std::mt19937_64& rng,
                          const std::vector<std::string>& dict) {
  std::string s = seeds[size_t(rng() % seeds.size())];
  for (uint64_t k = rng() % 3 ? 1 : 2 + rng() % 4; k-- > 0;) mutate(s, rng, dict);
  return s;
}

// The input being run, printed to stderr if the process dies on a signal (a crash is a bug
// too): point current_input() at each input while it runs, after install_crash_report(who).
inline const std::string*& current_input() {
  static const std::string* p = nullptr;
  return p;
}
inline const char*& crash_reporter() {
  static const char* who = "";
  return who;
}
inline void report_crash(int sig) {
  if (const std::string* in = current_input()) {
    const char* who = crash_reporter();
    (void)!write(2, "\n", 1);
    (void)!write(2, who, std::strlen(who));
    const char head[] = ": crashed on this input:\n";
    (void)!write(2, head, sizeof head - 1);
    (void)!write(2, in->data(), in->size());
    (void)!write(2, "\n", 1);
  }
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}
inline void install_crash_report(const char* who) {
  crash_reporter() = who;
  for (int sig : {SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL}) std::signal(sig, report_crash);
}

// The generator every corpus run starts from ("kiln"): the same mutants on every run and machine.
inline constexpr uint64_t kMutationSeed = 0x6b696c6e;

}  // namespace kiln::fuzz
