// libFuzzer target: any bytes as a .safetensors file, opened and every
// tensor it lists read (upcast to float32); also as a token file.
#include <cstddef>
#include <cstdint>

#include "common/safetensors.h"
#include "tests/fuzz/fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  lact::fuzz::FuzzFile file(data, size);
  absl::StatusOr<lact::SafetensorsFile> st = lact::SafetensorsFile::Open(file.path());
  if (!st.ok()) return 0;
  for (const auto& [name, entry] : st->entries()) (void)st->ReadFloat(name);
  return 0;
}
