// Writes the seed corpus of rx_fuzz from the Soft-RoCE captures in
// tests/data: each distinct opcode's first packets, as they were (control
// bytes 0x0c: no fix-ups) and aimed at the victim's QPs with fix-ups
// (rx_harness.hpp).
//
//   make_fuzz_corpus tests/data tests/fuzz/corpus
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "support/pcap.hpp"
#include "wire/opcode.hpp"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: make_fuzz_corpus DATA_DIR OUT_DIR\n");
    return 2;
  }
  const std::string data = argv[1], out = argv[2];
  int written = 0;
  for (const char* name : {"rxe_rc_pingpong", "rxe_ud_pingpong", "rxe_ib_write_bw", "rxe_ib_read_lat", "rxe_rping"}) {
    auto file = uroce::test::read_pcap(data + "/" + name + ".pcap");
    if (!file.ok()) {
      std::fprintf(stderr, "%s: %s\n", name, file.status().to_string().c_str());
      return 1;
    }
    std::map<std::pair<uint8_t, size_t>, int> seen;  // (opcode, size class)
    for (const auto& f : uroce::test::roce_frames(*file)) {
      const auto p = f.payload();
      if (p.size() < 16) continue;
      const uint8_t opcode = p[0];
      if (seen[{opcode, p.size() > 300}]++ >= 2) continue;
      const auto& oi = uroce::wire::info(opcode);
      const uint8_t dest = oi.service == uroce::wire::Service::ud ? 2 : oi.service == uroce::wire::Service::uc ? 1 : 0;
      const bool keyed = oi.reth || oi.atomic_eth;
      const uint8_t aimed = uint8_t(0x01 | dest << 2 | 0x10 | (keyed ? 0x60 : 0));
      for (uint8_t ctl0 : {uint8_t(0x0c), aimed}) {
        std::vector<uint8_t> in{ctl0, 0};
        in.insert(in.end(), p.begin(), p.end());
        if (ctl0 != 0x0c) in[2 + 11] = 0;  // PSN delta 0: the expected PSN
        const std::string path = out + "/" + name + "-" + std::to_string(f.index) + (ctl0 == 0x0c ? "-raw" : "-aimed");
        FILE* o = std::fopen(path.c_str(), "wb");
        if (!o || std::fwrite(in.data(), 1, in.size(), o) != in.size()) return 1;
        std::fclose(o);
        ++written;
      }
    }
  }
  std::printf("make_fuzz_corpus: %d inputs in %s\n", written, out.c_str());
  return 0;
}
