// tests/data/vectors.txt: named RoCEv2 test vectors, each an IP packet
// (IP header .. ICRC) in hex.  Format, two lines per vector:
//   V1 RC SEND_ONLY IPv4: ok=True icrc=233ea70a
//     4500003c...233ea70a
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.hpp"

namespace uroce::test {

struct Vector {
  std::string id;              // "V1"
  std::string name;            // the whole title line
  std::vector<uint8_t> icrc;   // the icrc= bytes, in wire order
  std::vector<uint8_t> bytes;  // IP header .. ICRC
};

Result<std::vector<Vector>> read_vectors(const std::string& path);

}  // namespace uroce::test
