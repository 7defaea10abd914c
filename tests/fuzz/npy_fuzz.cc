// libFuzzer target: any bytes as an .npy file, read whole (ReadNpy) and as
// a token file (OpenTokenFile, then its first rows). Every input must end
// in a value or a status: no crash, no allocation larger than the file.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/data_files.h"
#include "common/npy.h"
#include "tests/fuzz/fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  lact::fuzz::FuzzFile file(data, size);
  (void)lact::ParseNpyLayout("fuzz", data, size);
  (void)lact::ReadNpy(file.path());
  absl::StatusOr<lact::TokenFileLayout> tokens =
      lact::OpenTokenFile(lact::DataPath::Split(file.path()), "");
  if (tokens.ok() && tokens->rows * tokens->width <= (int64_t{1} << 20)) {
    const int64_t rows = tokens->rows < 4 ? tokens->rows : 4;
    std::vector<float> out(rows * tokens->width);
    (void)lact::ReadTokenRows(*tokens, 0, rows, out.data());
  }
  return 0;
}
