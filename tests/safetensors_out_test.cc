// SafetensorsOut and RangeWriter against the safetensors reader: a large
// tensor written as ranges from several threads at once, with boundaries
// that split disk blocks (so the aligned middles go through O_DIRECT and
// the shared ends through the page cache), read back byte for byte; the
// small tensors after it; and the errors that name what is wrong.
#include "common/safetensors_out.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/random.h"
#include "common/safetensors.h"

namespace lact {
namespace {

std::string Scratch(const std::string& name) {
  return absl::StrCat(::testing::TempDir(), "/safetensors_out_", getpid(), "_", name);
}

Tensor RandomTensor(std::vector<int64_t> shape, uint64_t seed) {
  Tensor t(std::move(shape));
  Random rng(seed);
  for (float& v : t.data) v = static_cast<float>(rng.Normal());
  return t;
}

TEST(SafetensorsOut, RangesFromThreadsReadBackExactly) {
  const int64_t width = 33;  // 132-byte rows: no range boundary falls on a block
  const Tensor big = RandomTensor({200003, width}, 1), small = RandomTensor({7, 5}, 2);
  const std::string path = Scratch("ranges.safetensors");
  absl::StatusOr<std::unique_ptr<SafetensorsOut>> out =
      SafetensorsOut::Create(path, {{"k", "v"}}, {{"output", big.shape}, {"small", small.shape}});
  ASSERT_TRUE(out.ok()) << out.status();
  const std::vector<int64_t> cuts{0, 70001, 70002, 140000, 200003};  // one range of a single row
  std::vector<std::thread> threads;
  std::vector<absl::Status> statuses(cuts.size() - 1);
  for (size_t r = 0; r + 1 < cuts.size(); ++r) {
    threads.emplace_back([&, r] {
      const uint64_t row = width * sizeof(float);
      absl::StatusOr<std::unique_ptr<RangeWriter>> w =
          (*out)->Rows("output", cuts[r] * row, (cuts[r + 1] - cuts[r]) * row);
      if (!w.ok()) {
        statuses[r] = w.status();
        return;
      }
      // Pieces of uneven sizes, as messages arrive.
      const char* bytes = reinterpret_cast<const char*>(big.ptr() + cuts[r] * width);
      uint64_t left = (cuts[r + 1] - cuts[r]) * row, piece = 1000;
      while (left > 0 && statuses[r].ok()) {
        const uint64_t take = std::min(left, piece);
        statuses[r] = (*w)->Append(bytes, take);
        bytes += take;
        left -= take;
        piece = piece * 3 % 5000000 + 17;
      }
      if (statuses[r].ok() && (*w)->left() != 0) statuses[r] = absl::InternalError("bytes left");
    });
  }
  for (std::thread& t : threads) t.join();
  for (const absl::Status& s : statuses) ASSERT_TRUE(s.ok()) << s;
  ASSERT_TRUE((*out)->Write("small", small).ok());
  ASSERT_TRUE((*out)->Finish().ok());

  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->data_start() % RangeWriter::kDirectBlock, 0u);
  EXPECT_EQ(file->metadata().at("k"), "v");
  absl::StatusOr<Tensor> got = file->ReadFloat("output");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->shape, big.shape);
  EXPECT_TRUE(got->data == big.data) << "the rows read back differ";
  absl::StatusOr<Tensor> got_small = file->ReadFloat("small");
  ASSERT_TRUE(got_small.ok()) << got_small.status();
  EXPECT_TRUE(got_small->data == small.data);
  std::filesystem::remove(path);
}

TEST(SafetensorsOut, WriterOfWholeTensorsReadsBack) {
  const Tensor a = RandomTensor({3, 4}, 3), b = RandomTensor({5000, 700}, 4);
  const std::string path = Scratch("whole.safetensors");
  SafetensorsWriter writer;
  writer.Add("b", b);
  writer.Add("a", a);
  ASSERT_TRUE(writer.Write(path).ok());
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_TRUE(file->ReadFloat("a")->data == a.data);
  EXPECT_TRUE(file->ReadFloat("b")->data == b.data);
  std::filesystem::remove(path);
}

TEST(SafetensorsOut, ErrorsNameTheProblem) {
  const std::string path = Scratch("errors.safetensors");
  EXPECT_EQ(SafetensorsOut::Create(path, {}, {{"x", {2}}, {"x", {3}}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::unique_ptr<SafetensorsOut>> missing_dir =
      SafetensorsOut::Create(Scratch("no/such/folder.safetensors"), {}, {{"x", {2}}});
  EXPECT_EQ(missing_dir.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(missing_dir.status().message().find("cannot create"), std::string::npos);

  absl::StatusOr<std::unique_ptr<SafetensorsOut>> out =
      SafetensorsOut::Create(path, {}, {{"x", {4, 2}}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)->Rows("y", 0, 8).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ((*out)->Rows("x", 24, 16).status().code(), absl::StatusCode::kOutOfRange);
  absl::StatusOr<std::unique_ptr<RangeWriter>> w = (*out)->Rows("x", 8, 8);
  ASSERT_TRUE(w.ok());
  const float values[4] = {1, 2, 3, 4};
  EXPECT_EQ((*w)->Append(reinterpret_cast<const char*>(values), 16).code(),
            absl::StatusCode::kOutOfRange);
  const absl::Status shape = (*out)->Write("x", Tensor({2, 4}));
  EXPECT_EQ(shape.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(shape.message().find("[4, 2] planned"), std::string::npos) << shape;
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace lact
