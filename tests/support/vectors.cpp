#include "support/vectors.hpp"

#include <fstream>
#include <stdexcept>

#include "support/hex.hpp"

namespace uroce::test {

Result<std::vector<Vector>> read_vectors(const std::string& path) {
  std::ifstream in(path);
  if (!in) return err::noent("read_vectors: cannot open " + path);
  std::vector<Vector> out;
  std::string line;
  try {
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      if (line[0] == ' ') {  // the hex line of the last title
        if (out.empty() || !out.back().bytes.empty()) return err::inval(path + ": hex line without a title: " + line);
        out.back().bytes = from_hex(line);
        continue;
      }
      Vector v;
      v.name = line;
      v.id = line.substr(0, line.find(' '));
      const auto at = line.find("icrc=");
      if (at == std::string::npos) return err::inval(path + ": no icrc= in " + line);
      v.icrc = from_hex(line.substr(at + 5, 8));
      out.push_back(std::move(v));
    }
  } catch (const std::invalid_argument& e) {
    return err::inval(path + ": " + e.what());
  }
  return out;
}

}  // namespace uroce::test
