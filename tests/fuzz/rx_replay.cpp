// Replays the fuzz corpus through the receive path (rx_harness.hpp) with any
// compiler, then a bounded number of deterministic mutations of it: the
// sanitizer builds run it as a test even without clang's libFuzzer.
//
//   rx_replay DIR_OR_FILE... [--mutations N] [--seed S]
#include <dirent.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "rx_harness.hpp"

namespace {

std::vector<std::vector<uint8_t>> load(const std::string& path) {
  std::vector<std::vector<uint8_t>> out;
  if (DIR* d = ::opendir(path.c_str())) {
    std::vector<std::string> names;
    while (dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') names.push_back(path + "/" + e->d_name);
    ::closedir(d);
    std::sort(names.begin(), names.end());
    for (const auto& n : names)
      for (auto& f : load(n)) out.push_back(std::move(f));
    return out;
  }
  std::ifstream f(path, std::ios::binary);
  if (f) out.emplace_back(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  return out;
}

uint64_t next(uint64_t& s) {
  s ^= s << 13;
  s ^= s >> 7;
  s ^= s << 17;
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::vector<uint8_t>> corpus;
  long mutations = 0;
  uint64_t seed = 1;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--mutations") && i + 1 < argc)
      mutations = std::atol(argv[++i]);
    else if (!std::strcmp(argv[i], "--seed") && i + 1 < argc)
      seed = std::strtoull(argv[++i], nullptr, 10) | 1;
    else
      for (auto& f : load(argv[i])) corpus.push_back(std::move(f));
  }
  if (corpus.empty()) {
    std::fprintf(stderr, "rx_replay: no inputs\n");
    return 2;
  }
  uroce::fuzz::init();
  for (const auto& in : corpus) uroce::fuzz::one_input(in.data(), in.size());
  // Mutations: flip, overwrite, truncate, extend; the control bytes too.
  uint64_t s = seed * 0x9e3779b97f4a7c15ull | 1;
  std::vector<uint8_t> m;
  for (long k = 0; k < mutations; ++k) {
    m = corpus[next(s) % corpus.size()];
    const int edits = 1 + int(next(s) % 4);
    for (int e = 0; e < edits && !m.empty(); ++e) {
      const size_t at = next(s) % m.size();
      switch (next(s) % 5) {
        case 0: m[at] ^= uint8_t(1u << (next(s) % 8)); break;
        case 1: m[at] = uint8_t(next(s)); break;
        case 2: m.resize(at + 1); break;
        case 3: m.insert(m.begin() + long(at), uint8_t(next(s))); break;
        default: m[0] = uint8_t(next(s)); break;  // other fix-ups
      }
    }
    uroce::fuzz::one_input(m.data(), m.size());
  }
  std::printf("rx_replay: %zu corpus inputs and %ld mutations, no fault\ncounters: %s\n", corpus.size(), mutations,
              uroce::fuzz::counters().c_str());
  return 0;
}
