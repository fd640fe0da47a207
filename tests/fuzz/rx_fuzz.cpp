// libFuzzer target: every input is one packet received by the victim NIC
// (rx_harness.hpp).  Built with clang -fsanitize=fuzzer,address,undefined
// when UROCE_FUZZ=ON; `rx_fuzz -max_total_time=60 work/ corpus/` fuzzes.
#include <cstddef>
#include <cstdint>

#include "rx_harness.hpp"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  uroce::fuzz::init();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  uroce::fuzz::one_input(data, size);
  return 0;
}
