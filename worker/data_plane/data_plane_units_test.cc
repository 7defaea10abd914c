// The data plane's plain parts without a network, on real files: paths
// resolved inside a data root (and every way out of it refused), token
// files read by rows in every dtype, outputs created and filled at row
// offsets (whole, or streamed in pieces as a worker makes them), the
// chunk checks of TokenReceiver, and ShardTransfer's
// hand-over between a client stream and RunShard (tickets, one stream per
// shard, idle timeout, failures seen by both sides).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/data_files.h"
#include "common/huge_pages.h"
#include "common/mapped_file.h"
#include "common/model.h"
#include "common/npy.h"
#include "common/peak_rss.h"
#include "common/safetensors.h"
#include "common/status_macros.h"
#include "kernels/cpu/threading.h"
#include "worker/data_plane/context_spool.h"
#include "worker/data_plane/output_file_stream.h"
#include "worker/data_plane/retained_results.h"
#include "worker/data_plane/shard_transfer.h"
#include "worker/data_plane/token_receiver.h"

namespace lact {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr std::chrono::milliseconds kNoWait(0);
namespace fs = std::filesystem;

// A file the test chose itself: its folder as the root.
DataPath In(const std::string& path) { return DataPath::Split(path); }

class DataRoot : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = absl::StrCat(::testing::TempDir(), "/lact_data_", getpid(), "_",
                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(base_);
    root_ = base_ + "/root";
    fs::create_directories(root_ + "/sub");
    fs::create_directories(base_ + "/outside");
  }
  void TearDown() override { fs::remove_all(base_); }

  static Tensor Rows(int64_t n, int64_t width, float scale) {
    Tensor t({n, width});
    for (int64_t i = 0; i < t.size(); ++i) t.data[i] = scale * static_cast<float>(i % 97) - 3.0f;
    return t;
  }
  static void WriteBytes(const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary) << bytes;
  }
  // An .npy of `descr` with 2-byte values `bits` per element.
  static void WriteNpy16(const std::string& path, const std::string& descr, int64_t rows,
                         int64_t width, const std::vector<uint16_t>& bits) {
    std::string header = NpyF32Header({rows, width});
    header.replace(header.find("'<f4'"), 5, "'" + descr + "'");
    WriteBytes(path,
               header + std::string(reinterpret_cast<const char*>(bits.data()), bits.size() * 2));
  }

  std::string base_, root_;
};

TEST_F(DataRoot, PathsResolveInsideTheRootOnly) {
  const std::string sub = "sub/a.npy";
  EXPECT_EQ(ResolveDataPath(root_, root_ + "/sub/a.npy")->relative, sub);
  EXPECT_EQ(ResolveDataPath(root_, "sub/a.npy")->relative, sub);
  EXPECT_EQ(ResolveDataPath(root_, "./sub//a.npy")->relative, sub);
  EXPECT_EQ(ResolveDataPath(root_, "file://" + root_ + "/sub/a.npy")->relative, sub);
  EXPECT_EQ(ResolveDataPath(root_, "sub/a.npy", "alice")->relative, "alice/sub/a.npy");
  EXPECT_EQ(ResolveDataPath(root_, root_ + "/alice/a.npy", "alice")->relative, "alice/a.npy");

  struct Case {
    std::string ref, folder;
    absl::StatusCode code;
    std::string message;
  } cases[] = {
      {base_ + "/outside/secret.npy", "", absl::StatusCode::kPermissionDenied,
       "is outside the data root"},
      {"../outside/secret.npy", "", absl::StatusCode::kPermissionDenied, "'..' is not followed"},
      {"sub/../../outside/x.npy", "", absl::StatusCode::kPermissionDenied, "'..' is not followed"},
      {root_ + "x/a.npy", "", absl::StatusCode::kPermissionDenied, "is outside the data root"},
      {root_ + "/bob/a.npy", "alice", absl::StatusCode::kPermissionDenied, "outside your folder"},
      {"../bob/a.npy", "alice", absl::StatusCode::kPermissionDenied, "'..' is not followed"},
      {"sub/", "", absl::StatusCode::kInvalidArgument, "does not name a file"},
      {".", "", absl::StatusCode::kInvalidArgument, "does not name a file"},
      {root_, "", absl::StatusCode::kInvalidArgument, "does not name a file"},
      {"file://host/x.npy", "", absl::StatusCode::kInvalidArgument, "only file:///absolute/path"},
      {"", "", absl::StatusCode::kInvalidArgument, "empty"},
      {std::string(5000, 'a'), "", absl::StatusCode::kInvalidArgument, "at most 4096"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<DataPath> got = ResolveDataPath(root_, c.ref, c.folder);
    EXPECT_EQ(got.status().code(), c.code) << c.ref << ": " << got.status();
    EXPECT_THAT(std::string(got.status().message()), HasSubstr(c.message)) << c.ref;
    EXPECT_LT(got.status().message().size(), 600u) << "a long name is quoted only in part";
  }
  EXPECT_EQ(ResolveDataPath(root_, "a.npy", "..").status().code(),
            absl::StatusCode::kPermissionDenied)
      << "a tenant named '..' gets no folder";
  EXPECT_EQ(OpenTokenFile(DataPath{root_, "../outside/secret.npy"}, "").status().code(),
            absl::StatusCode::kInvalidArgument)
      << "'..' is refused at the open too";
  absl::StatusOr<DataPath> no_root = ResolveDataPath("", "a.npy");
  EXPECT_EQ(no_root.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(no_root.status().message()), HasSubstr("--data-root"));
}

TEST_F(DataRoot, OpensNeverFollowASymlinkOutOfTheRoot) {
  const Tensor t = Rows(4, 3, 1.0f);
  ASSERT_TRUE(WriteNpy(root_ + "/sub/a.npy", t).ok());
  ASSERT_TRUE(WriteNpy(base_ + "/outside/secret.npy", t).ok());
  fs::create_symlink(base_ + "/outside/secret.npy", root_ + "/link.npy");
  fs::create_symlink(base_ + "/outside", root_ + "/escape");
  fs::create_symlink(root_ + "/sub/a.npy", root_ + "/inner_link.npy");
  const auto open = [&](const std::string& ref) {
    return OpenTokenFile(*ResolveDataPath(root_, ref), "").status();
  };
  ASSERT_TRUE(open("sub/a.npy").ok());
  for (const std::string ref : {"link.npy", "escape/secret.npy", "inner_link.npy"}) {
    const absl::Status s = open(ref);
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << ref << ": " << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("symlinks are not followed")) << ref;
    EXPECT_THAT(std::string(s.message()), Not(HasSubstr("outside")))
        << "where it points is not said";
  }
  EXPECT_EQ(open("missing.npy").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(open("nofolder/x.npy").code(), absl::StatusCode::kNotFound);
  // Outside the root nothing is looked at: a file that exists there and
  // one that does not are refused alike.
  const absl::Status there = ResolveDataPath(root_, base_ + "/outside/secret.npy").status();
  const absl::Status absent = ResolveDataPath(root_, base_ + "/outside/absent.npy").status();
  EXPECT_EQ(there.code(), absent.code());
  EXPECT_EQ(absl::StrReplaceAll(there.message(), {{"secret", "X"}}),
            absl::StrReplaceAll(absent.message(), {{"absent", "X"}}));

  // The name was checked while `sub` was a folder; by the time of use it is
  // a symlink out of the root: nothing outside is created, read or removed.
  const DataPath out = *ResolveDataPath(root_, "sub/new.npy");
  const DataPath in = *ResolveDataPath(root_, "sub/a.npy");
  fs::rename(root_ + "/sub", base_ + "/moved");
  fs::create_symlink(base_ + "/outside", root_ + "/sub");
  ASSERT_TRUE(WriteNpy(base_ + "/outside/a.npy", t).ok());
  const absl::StatusOr<ReadyFile> created = CreateOutputFile(out, 4, 3);
  EXPECT_EQ(created.status().code(), absl::StatusCode::kPermissionDenied) << created.status();
  EXPECT_FALSE(fs::exists(base_ + "/outside/new.npy"));
  EXPECT_EQ(OpenTokenFile(in, "").status().code(), absl::StatusCode::kPermissionDenied);
  ASSERT_TRUE(fs::exists(base_ + "/outside/a.npy"));
  EXPECT_FALSE(RemoveDataFile(in, FileId{}).ok());
  EXPECT_TRUE(fs::exists(base_ + "/outside/a.npy"));
}

TEST_F(DataRoot, OnlyRegularFilesAreOpenedAndAFifoNeverBlocks) {
  ASSERT_EQ(mkfifo((root_ + "/pipe.npy").c_str(), 0600), 0);
  const auto started = std::chrono::steady_clock::now();
  const absl::Status read = OpenTokenFile(*ResolveDataPath(root_, "pipe.npy"), "").status();
  EXPECT_EQ(read.code(), absl::StatusCode::kInvalidArgument) << read;
  EXPECT_THAT(std::string(read.message()), HasSubstr("is a FIFO, not a regular file"));
  const absl::Status written =
      CreateOutputFile(*ResolveDataPath(root_, "pipe.npy"), 1, 1, /*replace=*/true).status();
  EXPECT_EQ(written.code(), absl::StatusCode::kInvalidArgument) << written;
  const absl::Status folder = OpenTokenFile(*ResolveDataPath(root_, "sub"), "").status();
  EXPECT_THAT(std::string(folder.message()), HasSubstr("is a folder"));
  EXPECT_EQ(MappedFile::Open(root_ + "/pipe.npy").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(2));
}

TEST_F(DataRoot, OutputsAreCreatedExclusivelyAndRemovedOnlyWhileTheirOwn) {
  const DataPath out = *ResolveDataPath(root_, "out.npy");
  WriteBytes(root_ + "/out.npy", "someone else's file");
  EXPECT_EQ(CreateOutputFile(out, 2, 2).status().code(), absl::StatusCode::kAlreadyExists);
  std::ifstream kept(root_ + "/out.npy");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(kept), {}), "someone else's file");
  absl::StatusOr<ReadyFile> replaced = CreateOutputFile(out, 2, 2, /*replace=*/true);
  ASSERT_TRUE(replaced.ok()) << replaced.status();
  EXPECT_FALSE(replaced->created);

  fs::remove(root_ + "/out.npy");
  absl::StatusOr<ReadyFile> made = CreateOutputFile(out, 2, 2);
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_TRUE(made->created);
  // Another file took the name (the job's own moved aside): it is left alone.
  fs::rename(root_ + "/out.npy", root_ + "/moved.npy");
  WriteBytes(root_ + "/out.npy", "another");
  EXPECT_EQ(RemoveDataFile(out, made->id).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(fs::exists(root_ + "/out.npy"));
  absl::StatusOr<std::optional<FileId>> now = ExistingDataFile(out);
  ASSERT_TRUE(now.ok() && now->has_value());
  EXPECT_TRUE(RemoveDataFile(out, **now).ok());
  EXPECT_FALSE(fs::exists(root_ + "/out.npy"));

  // The context under another name (a hard link) is never its own output.
  ASSERT_TRUE(WriteNpy(root_ + "/context.npy", Rows(2, 2, 1.0f)).ok());
  fs::create_hard_link(root_ + "/context.npy", root_ + "/alias.npy");
  FileId context;
  ASSERT_TRUE(OpenTokenFile(*ResolveDataPath(root_, "context.npy"), "", &context).ok());
  const absl::Status same =
      CreateOutputFile(*ResolveDataPath(root_, "alias.npy"), 2, 2, true, &context).status();
  EXPECT_EQ(same.code(), absl::StatusCode::kInvalidArgument) << same;
  EXPECT_THAT(std::string(same.message()), HasSubstr("is the context file itself"));
  EXPECT_TRUE(ReadNpy(root_ + "/context.npy").ok()) << "the context is untouched";
}

TEST_F(DataRoot, ATokenFileHeaderIsCappedAndNotEchoed) {
  // A safetensors header of 2 MiB: one tensor whose name is most of it.
  const std::string name(2 << 20, 'n');
  const std::string header =
      "{\"" + name + "\":{\"dtype\":\"F32\",\"shape\":[1,1],\"data_offsets\":[0,4]}}";
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  WriteBytes(root_ + "/big.safetensors", bytes + header + std::string(4, '\0'));
  const absl::Status s = OpenTokenFile(*ResolveDataPath(root_, "big.safetensors"), "").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("this file may have"));
  EXPECT_LT(s.message().size(), 400u);
}

TEST_F(DataRoot, RowsReadInEveryDtypeEqualTheDecodedValues) {
  const Tensor t = Rows(7, 5, 0.25f);
  ASSERT_TRUE(WriteNpy(root_ + "/f32.npy", t).ok());
  std::vector<uint16_t> bf16(t.size()), f16(t.size());
  const std::string bf16_bytes = EncodeFloats(t.ptr(), t.size(), WireType::kBF16);
  const std::string f16_bytes = EncodeFloats(t.ptr(), t.size(), WireType::kF16);
  std::memcpy(bf16.data(), bf16_bytes.data(), bf16_bytes.size());
  std::memcpy(f16.data(), f16_bytes.data(), f16_bytes.size());
  WriteNpy16(root_ + "/bf16.npy", "|V2", 7, 5, bf16);
  WriteNpy16(root_ + "/f16.npy", "<f2", 7, 5, f16);
  SafetensorsWriter writer;  // holds the tensors by reference
  const Tensor other = Rows(2, 2, 1.0f);
  writer.Add("other", other);
  writer.Add("tokens", t);
  ASSERT_TRUE(writer.Write(root_ + "/tokens.safetensors").ok());

  struct Case {
    std::string file, tensor;
    WireType dtype;
  } cases[] = {{"f32.npy", "", WireType::kF32},
               {"bf16.npy", "", WireType::kBF16},
               {"f16.npy", "", WireType::kF16},
               {"tokens.safetensors", "tokens", WireType::kF32}};
  for (const Case& c : cases) {
    absl::StatusOr<TokenFileLayout> file = OpenTokenFile(In(root_ + "/" + c.file), c.tensor);
    ASSERT_TRUE(file.ok()) << c.file << ": " << file.status();
    EXPECT_EQ(file->dtype, c.dtype) << c.file;
    EXPECT_EQ(file->rows, 7);
    EXPECT_EQ(file->width, 5);
    std::vector<float> want(3 * 5), got(3 * 5);
    int64_t tokens = 0;
    const std::string wire = EncodeFloats(t.ptr() + 2 * 5, 3 * 5, c.dtype);
    ASSERT_TRUE(DecodeTokensInto(wire, c.dtype, 5, 2, want.data(), 15, &tokens).ok());
    ASSERT_TRUE(ReadTokenRows(*file, 2, 3, got.data()).ok()) << c.file;
    EXPECT_EQ(got, want) << c.file;
    EXPECT_EQ(ReadTokenRows(*file, 5, 3, got.data()).code(), absl::StatusCode::kOutOfRange);
  }
  EXPECT_THAT(std::string(OpenTokenFile(In(root_ + "/tokens.safetensors"), "").status().message()),
              HasSubstr("holds several tensors; name one"));
  EXPECT_THAT(
      std::string(OpenTokenFile(In(root_ + "/tokens.safetensors"), "nope").status().message()),
      HasSubstr("has no tensor 'nope'"));
}

TEST_F(DataRoot, BadTokenFilesAreRefusedWithAMessage) {
  const Tensor t = Rows(8, 4, 1.0f);
  ASSERT_TRUE(WriteNpy(root_ + "/good.npy", t).ok());
  const std::string good = [&] {
    std::ifstream in(root_ + "/good.npy", std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  WriteBytes(root_ + "/short.npy", good.substr(0, good.size() - 5));
  WriteBytes(root_ + "/header_only.npy", good.substr(0, 20));
  WriteBytes(root_ + "/garbage.bin", "hello world");
  // The good file with another shape in its header, the header's length
  // kept (its padding shortened).
  const auto with_shape = [&](const std::string& shape) {
    std::string bytes = good;
    bytes.replace(bytes.find("(8,4)"), 5, shape);
    bytes.erase(bytes.find(" \n") - (shape.size() - 5), shape.size() - 5);
    return bytes;
  };
  // (2^32, 256): rows x width x 4 bytes once overflowed; (2^62, 2^62)
  // wraps the byte count to 0.
  WriteBytes(root_ + "/huge.npy", with_shape("(4294967296, 256)"));
  WriteBytes(root_ + "/overflow.npy", with_shape("(4611686018427387904, 4611686018427387904)"));
  ASSERT_TRUE(WriteNpy(root_ + "/three_d.npy", Tensor({2, 2, 2})).ok());
  std::string f64 = good;
  f64.replace(f64.find("'<f4'"), 5, "'<f8'");
  WriteBytes(root_ + "/f64.npy", f64);
  Tensor nan = t;
  nan.data[4 * 6 + 1] = std::nanf("");
  ASSERT_TRUE(WriteNpy(root_ + "/nan.npy", nan).ok());

  struct Case {
    std::string file, message;
  } cases[] = {
      {"short.npy", "too short for its header's 8 x 4 tokens"},
      {"huge.npy", "too short for its header's 4294967296 x 256 tokens of 4 bytes"},
      {"overflow.npy", "has more than 2^60 elements"},
      {"header_only.npy", "truncated header"},
      {"garbage.bin", "neither an .npy file"},
      {"three_d.npy", "is not [tokens, width]"},
      {"f64.npy", "dtype '<f8' is not a token dtype (allowed: <f4, <f2, |V2 = bfloat16)"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<TokenFileLayout> file = OpenTokenFile(In(root_ + "/" + c.file), "");
    EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument)
        << c.file << ": " << file.status();
    EXPECT_THAT(std::string(file.status().message()), HasSubstr(c.message)) << c.file;
  }
  absl::StatusOr<TokenFileLayout> file = OpenTokenFile(In(root_ + "/nan.npy"), "");
  ASSERT_TRUE(file.ok());
  std::vector<float> rows(4 * 4);
  EXPECT_THAT(std::string(ReadTokenRows(*file, 4, 4, rows.data()).message()),
              HasSubstr("token 6 feature 1 is nan"));
}

TEST_F(DataRoot, OutputFilledAtRowOffsetsIsTheWholeTensor) {
  const Tensor t = Rows(10, 3, 0.5f);
  const std::string path = root_ + "/out.npy";
  WriteBytes(path, "an old file of another shape");
  ASSERT_TRUE(CreateOutputFile(In(path), 10, 3, /*replace=*/true).ok());
  ASSERT_TRUE(WriteTokenRows(In(path), 10, 3, 6, t.ptr() + 6 * 3, 4).ok());
  ASSERT_TRUE(WriteTokenRows(In(path), 10, 3, 0, t.ptr(), 6).ok());
  absl::StatusOr<Tensor> back = ReadNpy(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->shape, t.shape);
  EXPECT_EQ(back->data, t.data);
  EXPECT_EQ(WriteTokenRows(In(path), 10, 4, 0, t.ptr(), 1).code(),
            absl::StatusCode::kFailedPrecondition)
      << "a shape that disagrees with the header";
  fs::create_symlink(base_ + "/outside/target.npy", root_ + "/sym.npy");
  EXPECT_FALSE(CreateOutputFile(In(root_ + "/sym.npy"), 1, 1, /*replace=*/true).ok())
      << "never written through a symlink";
  EXPECT_FALSE(fs::exists(base_ + "/outside/target.npy"));
}

TEST_F(DataRoot, SpooledRowsInTheirWireDtypeReadBackAsTheirDecodedValues) {
  const Tensor t = Rows(10, 3, -0.75f);
  for (WireType dtype : {WireType::kF32, WireType::kBF16, WireType::kF16}) {
    const std::string path = root_ + "/spool.npy";
    ASSERT_TRUE(CreateTokenFile(In(path), 10, 3, dtype).ok());
    absl::StatusOr<TokenFileWriter> writer = TokenFileWriter::Open(In(path), 10, 3, dtype);
    ASSERT_TRUE(writer.ok()) << writer.status();
    const std::string wire = EncodeFloats(t.ptr(), t.size(), dtype);
    const size_t row = 3 * WireBytes(dtype);
    // Rows 6..9 as one piece, then rows 0..5 as two (a chunk that came in parts).
    ASSERT_TRUE(writer->Write(6, {absl::string_view(wire).substr(6 * row)}).ok());
    ASSERT_TRUE(writer
                    ->Write(0, {absl::string_view(wire).substr(0, 2 * row),
                                absl::string_view(wire).substr(2 * row, 4 * row)})
                    .ok());
    EXPECT_EQ(writer->Write(9, {absl::string_view(wire).substr(0, 2 * row)}).code(),
              absl::StatusCode::kOutOfRange)
        << "past the last row";
    EXPECT_EQ(writer->Write(0, {absl::string_view(wire).substr(0, row - 1)}).code(),
              absl::StatusCode::kOutOfRange)
        << "not whole rows";
    absl::StatusOr<TokenFileLayout> file = OpenTokenFile(In(path), "");
    ASSERT_TRUE(file.ok()) << file.status();
    EXPECT_EQ(file->dtype, dtype);
    std::vector<float> want(t.size()), got(t.size());
    int64_t tokens = 0;
    ASSERT_TRUE(DecodeTokensInto(wire, dtype, 3, 0, want.data(), t.size(), &tokens).ok());
    ASSERT_TRUE(ReadTokenRows(*file, 0, 10, got.data()).ok());
    EXPECT_EQ(got, want) << WireBytes(dtype) << "-byte tokens";
    EXPECT_EQ(TokenFileWriter::Open(In(path), 10, 4, dtype).status().code(),
              absl::StatusCode::kFailedPrecondition)
        << "a shape that disagrees with the header";
  }
}

TEST_F(DataRoot, LargeShardsWrittenAtOnceAroundTheCacheEqualTheWholeTensor) {
  // Three shards of 9-10 MB (the direct path), 37 floats wide, so no shard
  // boundary falls on a 4 KiB block: written concurrently, twice (the second
  // time over the first's cached pages), read back through the page cache.
  const int64_t rows = 200003, width = 37;
  const int64_t begins[] = {0, 66667, 133334, rows};
  const std::string path = root_ + "/large.npy";
  for (float base : {0.25f, -3.0f}) {
    const Tensor t = Rows(rows, width, base);
    ASSERT_TRUE(CreateOutputFile(In(path), rows, width, /*replace=*/true).ok());
    std::vector<std::thread> shards;
    std::vector<absl::Status> statuses(3);
    for (int r = 0; r < 3; ++r) {
      shards.emplace_back([&, r] {
        statuses[r] = WriteTokenRows(In(path), rows, width, begins[r], t.ptr() + begins[r] * width,
                                     begins[r + 1] - begins[r]);
      });
    }
    for (std::thread& s : shards) s.join();
    for (const absl::Status& s : statuses) ASSERT_TRUE(s.ok()) << s;
    absl::StatusOr<Tensor> back = ReadNpy(path);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->shape, t.shape);
    EXPECT_TRUE(back->data == t.data) << "base " << base;
  }
}

TEST_F(DataRoot, ShardsStreamedInRaggedPiecesEqualTheWholeTensor) {
  // Three shards of 9-10 MB streamed at once, each in pieces of 1 to 30,011
  // rows, so pieces start and end anywhere within 4 KiB blocks and within
  // the 8 MiB gathered direct writes.
  const int64_t rows = 200003, width = 37;
  const int64_t begins[] = {0, 66667, 133334, rows};
  const int64_t pieces[] = {1, 4097, 13, 30011, 7, 2048};
  const std::string path = root_ + "/streamed.npy";
  const Tensor t = Rows(rows, width, 1.5f);
  ASSERT_TRUE(CreateOutputFile(In(path), rows, width).ok());
  std::vector<std::thread> shards;
  std::vector<absl::Status> statuses(3);
  std::vector<int64_t> written(3);
  for (int r = 0; r < 3; ++r) {
    shards.emplace_back([&, r] {
      const int64_t n = begins[r + 1] - begins[r];
      absl::StatusOr<std::unique_ptr<OutputFileStream>> stream =
          OutputFileStream::Open(In(path), rows, width, begins[r], n);
      if (!stream.ok()) {
        statuses[r] = stream.status();
        return;
      }
      for (int64_t done = 0, k = 0; done < n && statuses[r].ok(); ++k) {
        const int64_t m = std::min(pieces[(k + r) % 6], n - done);
        Tensor piece({m, width});
        std::copy_n(t.ptr() + (begins[r] + done) * width, m * width, piece.ptr());
        statuses[r] = (*stream)->Put(RowSlice::Whole(std::move(piece)));
        done += m;
      }
      if (statuses[r].ok()) statuses[r] = (*stream)->Finish();
      written[r] = (*stream)->bytes_written();
    });
  }
  for (std::thread& s : shards) s.join();
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << statuses[r];
    EXPECT_EQ(written[r], (begins[r + 1] - begins[r]) * width * 4);
  }
  absl::StatusOr<Tensor> back = ReadNpy(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->shape, t.shape);
  EXPECT_TRUE(back->data == t.data);
}

TEST_F(DataRoot, AStreamedShardSaysWhatItsRowsLacked) {
  const std::string path = root_ + "/short.npy";
  ASSERT_TRUE(CreateOutputFile(In(path), 10, 3).ok());
  absl::StatusOr<std::unique_ptr<OutputFileStream>> stream =
      OutputFileStream::Open(In(path), 10, 3, 4, 5);
  ASSERT_TRUE(stream.ok()) << stream.status();
  ASSERT_TRUE((*stream)->Put(RowSlice::Whole(Rows(2, 3, 1.0f))).ok());
  EXPECT_THAT(std::string((*stream)->Finish().message()),
              HasSubstr("3 of the shard's rows not written"));
  absl::StatusOr<std::unique_ptr<OutputFileStream>> over =
      OutputFileStream::Open(In(path), 10, 3, 8, 2);
  ASSERT_TRUE(over.ok()) << over.status();
  ASSERT_TRUE(
      (*over)->Put(RowSlice::Whole(Rows(3, 3, 1.0f))).ok());  // found by the writer's thread
  const absl::Status finished = (*over)->Finish();
  EXPECT_EQ(finished.code(), absl::StatusCode::kOutOfRange) << finished;
  EXPECT_EQ((*over)->Put(RowSlice::Whole(Rows(1, 3, 1.0f))).code(), absl::StatusCode::kOutOfRange)
      << "a failed stream takes no more rows";
  EXPECT_EQ(OutputFileStream::Open(In(path), 10, 4, 0, 1).status().code(),
            absl::StatusCode::kFailedPrecondition)
      << "a shape that disagrees with the header";
  EXPECT_EQ(OutputFileStream::Open(In(root_ + "/none.npy"), 10, 3, 0, 1).status().code(),
            absl::StatusCode::kNotFound);
}

v1::TokenChunk Chunk(int set, int64_t offset, const std::vector<float>& v,
                     WireType dtype = WireType::kF32) {
  v1::TokenChunk c;
  c.set_set(set);
  c.set_offset(offset);
  c.set_data(EncodeFloats(v.data(), static_cast<int64_t>(v.size()), dtype));
  return c;
}

TEST(TokenReceiver, TokensDeclaredButNotSentHoldNoMemory) {
  // 1 GiB of context declared (the whole set was once zero-filled before
  // any chunk came); one query token and two context tokens arrive.
  const int64_t before = ResidentBytes();
  TokenReceiver receiver({int64_t{1} << 20, 4}, 256, WireType::kF32, 0);
  ASSERT_TRUE(receiver.Accept(Chunk(1, 0, std::vector<float>(256, 1.0f))).ok());
  ASSERT_TRUE(receiver.Accept(Chunk(0, 0, std::vector<float>(2 * 256, 2.0f))).ok());
  EXPECT_LT(ResidentBytes() - before, int64_t{64} << 20);
  EXPECT_THAT(std::string(receiver.CheckComplete().message()),
              HasSubstr("after 2 of the 1048576 tokens of the shard's context"));
}

// This process's anonymous memory in transparent huge pages, and the
// kernel's THP mode ("always", "madvise" or "never").
int64_t AnonHugePageBytes() {
  std::ifstream rollup("/proc/self/smaps_rollup");
  std::string key;
  int64_t kib = 0;
  while (rollup >> key) {
    if (key == "AnonHugePages:" && rollup >> kib) return kib << 10;
  }
  return 0;
}
std::string HugePageMode() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  std::getline(f, line);
  const size_t open = line.find('['), close = line.find(']');
  return open == std::string::npos ? "never" : line.substr(open + 1, close - open - 1);
}

// A 64 MiB context received with huge pages advised fills 2 MiB pages;
// without the advice (where the kernel leaves THP to madvise) it fills none.
TEST(TokenReceiver, ContextSetsFillHugePagesUnlessTurnedOff) {
  const std::string mode = HugePageMode();
  if (mode == "never") GTEST_SKIP() << "transparent huge pages are off on this machine";
  const int64_t tokens = 65536, width = 256, per_chunk = 4096;
  const std::vector<float> values(per_chunk * width, 0.5f);
  for (bool huge : {true, false}) {
    const int64_t before = AnonHugePageBytes();
    TokenReceiver receiver({tokens}, width, WireType::kF32, 0, huge);
    for (int64_t t = 0; t < tokens; t += per_chunk)
      ASSERT_TRUE(receiver.Accept(Chunk(0, t, values)).ok());
    ASSERT_TRUE(receiver.CheckComplete().ok());
    const int64_t grown = AnonHugePageBytes() - before;
    if (huge) {
      EXPECT_GE(grown, int64_t{32} << 20) << "of 64 MiB, in huge pages";
    } else if (mode == "madvise") {
      EXPECT_LT(grown, int64_t{8} << 20) << "no advice, no huge pages";
    }
    Tensor set = receiver.TakeSet(0);
    EXPECT_EQ(set.data[tokens * width - 1], 0.5f);
  }
}

// The buffer a worker reads a by-reference context into.
TEST(HugePages, HugePageTensorIsZeroFilledInHugePages) {
  if (HugePageMode() == "never") GTEST_SKIP() << "transparent huge pages are off on this machine";
  const int64_t before = AnonHugePageBytes();
  const Tensor t = HugePageTensor({65536, 256});
  EXPECT_GE(AnonHugePageBytes() - before, int64_t{32} << 20) << "of 64 MiB, in huge pages";
  EXPECT_EQ(t.shape, (std::vector<int64_t>{65536, 256}));
  ASSERT_EQ(t.size(), 65536 * 256);
  EXPECT_TRUE(std::all_of(t.data.begin(), t.data.end(), [](float v) { return v == 0.0f; }));
}

// The CPU backend's accumulator and held outputs: their pages first
// touched on every thread of the pool, then zero-filled as before.
TEST(HugePages, FaultedInOnThePoolAndStillZeroFilled) {
  const Tensor t = HugePageTensor({65536, 256}, cpu::FaultInPages);
  EXPECT_EQ(t.shape, (std::vector<int64_t>{65536, 256}));
  ASSERT_EQ(t.size(), 65536 * 256);
  EXPECT_TRUE(std::all_of(t.data.begin(), t.data.end(), [](float v) { return v == 0.0f; }));
  std::vector<char> bytes(3 * 4096 + 100, 0x7f);
  cpu::FaultInPages(bytes.data(), bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) {
    ASSERT_EQ(bytes[i], i % 4096 == 0 ? 0 : 0x7f) << "byte " << i;
  }
}

TEST(TokenReceiver, DecodesEachSetOnceAndNamesGlobalTokens) {
  TokenReceiver receiver({3, 2}, 2, WireType::kBF16, 100);
  ASSERT_TRUE(receiver.Accept(Chunk(0, 0, {1, 2, 3, 4}, WireType::kBF16)).ok());
  ASSERT_TRUE(receiver.Accept(Chunk(1, 0, {9, 9, 8, 8}, WireType::kBF16)).ok());
  EXPECT_THAT(std::string(receiver.CheckComplete().message()),
              HasSubstr("after 2 of the 3 tokens of the shard's context"));
  EXPECT_THAT(
      std::string(receiver.Accept(Chunk(0, 2, {5, std::nanf("")}, WireType::kBF16)).message()),
      HasSubstr("token 102 feature 1 is nan"));
  ASSERT_TRUE(receiver.Accept(Chunk(0, 2, {5, 6}, WireType::kBF16)).ok());
  ASSERT_TRUE(receiver.CheckComplete().ok());
  EXPECT_EQ(receiver.bytes_received(), 5 * 2 * 2);
  EXPECT_EQ(receiver.TakeSet(0).data, (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(receiver.TakeSet(1).data, (std::vector<float>{9, 9, 8, 8}));

  TokenReceiver queries_only({0, 1}, 2, WireType::kF32, 0);
  EXPECT_THAT(std::string(queries_only.Accept(Chunk(0, 0, {1, 2})).message()),
              HasSubstr("chunk for set 0; this shard takes 1 query sets (sets 1..1)"));
}

TEST_F(DataRoot, ATransferWithASpoolWritesItsContextRowsThere) {
  const std::string path = root_ + "/job.spool.npy";
  ASSERT_TRUE(CreateTokenFile(In(path), 5, 1, WireType::kF32).ok());
  // Rank 1 of a 5-token context: tokens 3 and 4.
  ShardTransfer transfer("secret", TokenReceiver({2}, 1, WireType::kF32, 3));
  absl::StatusOr<TokenFileWriter> writer = TokenFileWriter::Open(In(path), 5, 1, WireType::kF32);
  ASSERT_TRUE(writer.ok());
  transfer.SetSpool(std::make_unique<ContextSpool>(*std::move(writer), 3));
  ASSERT_TRUE(transfer.Attach(nullptr, kNoWait).ok());
  ASSERT_TRUE(transfer.Accept(Chunk(0, 0, {1.5f})).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(transfer.spooled()) << "not before the upload ended";
  ASSERT_TRUE(transfer.Accept(Chunk(0, 1, {-2.5f})).ok());
  ASSERT_TRUE(transfer.EndUpload().ok());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!transfer.spooled() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(transfer.spooled());
  absl::StatusOr<Tensor> back = ReadNpy(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->data, (std::vector<float>{0, 0, 0, 1.5f, -2.5f}));
}

// A new token file of `rows` x `width`, open for writing.
absl::StatusOr<TokenFileWriter> NewTokenFile(const std::string& path, int64_t rows, int64_t width,
                                             WireType dtype) {
  LACT_RETURN_IF_ERROR(CreateTokenFile(In(path), rows, width, dtype).status());
  return TokenFileWriter::Open(In(path), rows, width, dtype);
}

// Ends the spool's upload and waits (up to 10 s) for every row to be written.
bool EndAndWait(ContextSpool& spool) {
  spool.UploadEnded();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!spool.Complete() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return spool.Complete();
}

TEST_F(DataRoot, ASpoolTakesMoreChunksThanItsBuffersInOrder) {
  // 100 chunks of 3 rows through 8 buffers: every row lands where it belongs.
  const int64_t rows = 300;
  const std::string path = root_ + "/many.spool.npy";
  absl::StatusOr<TokenFileWriter> writer = NewTokenFile(path, rows, 2, WireType::kBF16);
  ASSERT_TRUE(writer.ok()) << writer.status();
  const Tensor t = Rows(rows, 2, 0.125f);
  const std::string wire = EncodeFloats(t.ptr(), t.size(), WireType::kBF16);
  {
    ContextSpool spool(*std::move(writer), 0);
    for (int64_t r = 0; r < rows; r += 3) spool.Add(r, {absl::string_view(wire).substr(r * 4, 12)});
    EXPECT_FALSE(spool.Complete()) << "the upload has not ended";
    ASSERT_TRUE(EndAndWait(spool));
  }
  absl::StatusOr<TokenFileLayout> file = OpenTokenFile(In(path), "");
  ASSERT_TRUE(file.ok());
  std::vector<float> want(t.size()), got(t.size());
  int64_t tokens = 0;
  ASSERT_TRUE(DecodeTokensInto(wire, WireType::kBF16, 2, 0, want.data(), t.size(), &tokens).ok());
  ASSERT_TRUE(ReadTokenRows(*file, 0, rows, got.data()).ok());
  EXPECT_EQ(got, want);
}

TEST_F(DataRoot, SpoolsOfTwoShardsInOrderSendTheirAlignedMiddlesStraightToTheDisk) {
  // Two shards of one large spool at once, their boundary inside a disk
  // block, each expecting its rows in order: the middles go by O_DIRECT,
  // the shared block through the page cache, and every row lands.
  const int64_t rows = 150001, width = 33, cut = 70001;
  const std::string path = root_ + "/large.spool.npy";
  ASSERT_TRUE(CreateTokenFile(In(path), rows, width, WireType::kF32).ok());
  const Tensor t = Rows(rows, width, 0.25f);
  std::vector<std::thread> shards;
  for (const auto& [begin, end] : {std::pair<int64_t, int64_t>{0, cut}, {cut, rows}}) {
    shards.emplace_back([&, begin, end] {
      absl::StatusOr<TokenFileWriter> writer =
          TokenFileWriter::Open(In(path), rows, width, WireType::kF32);
      ASSERT_TRUE(writer.ok()) << writer.status();
      writer->ExpectInOrder(begin, end - begin);
      ContextSpool spool(*std::move(writer), begin);
      for (int64_t r = begin; r < end; r += 997) {
        const int64_t n = std::min<int64_t>(997, end - r);
        spool.Add(r - begin, {absl::string_view(reinterpret_cast<const char*>(t.ptr() + r * width),
                                                n * width * sizeof(float))});
      }
      ASSERT_TRUE(EndAndWait(spool));
    });
  }
  for (std::thread& s : shards) s.join();
  absl::StatusOr<Tensor> back = ReadNpy(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->data == t.data) << "rows differ";
}

TEST_F(DataRoot, ASpoolWritesOwnedChunksFromWhereTheyLieAndThenLetsThemGo) {
  // As the Transfer stream hands them over: each chunk in a buffer of its
  // own (gRPC's slices), kept alive only by the owner given with it.
  const int64_t rows = 64;
  const std::string path = root_ + "/owned.spool.npy";
  absl::StatusOr<TokenFileWriter> writer = NewTokenFile(path, rows, 4, WireType::kF32);
  ASSERT_TRUE(writer.ok()) << writer.status();
  const Tensor t = Rows(rows, 4, 0.5f);
  std::vector<std::weak_ptr<const std::string>> owners;
  {
    ContextSpool spool(*std::move(writer), 0);
    for (int64_t r = 0; r < rows; r += 16) {
      auto chunk = std::make_shared<const std::string>(
          reinterpret_cast<const char*>(t.ptr() + r * 4), 16 * 4 * sizeof(float));
      owners.push_back(chunk);
      const absl::string_view bytes(*chunk);
      spool.Add(r, {bytes.substr(0, 100), bytes.substr(100)}, std::move(chunk));
    }
    ASSERT_TRUE(EndAndWait(spool));
    for (const auto& owner : owners) EXPECT_TRUE(owner.expired()) << "held after it was written";
  }
  absl::StatusOr<Tensor> back = ReadNpy(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->data, t.data);
}

TEST(TransferBoard, StreamsForShardsNotStartedWaitBoundedInNumber) {
  TransferBoard board;
  std::vector<std::thread> waiting;
  std::atomic<int> not_found{0};
  for (int i = 0; i < TransferBoard::kMaxWaiting; ++i) {
    waiting.emplace_back([&, i] {
      const auto found = board.Find("job-made-up", i, "ticket", std::chrono::milliseconds(1500));
      not_found += absl::IsNotFound(found.status());
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto asked = std::chrono::steady_clock::now();
  const auto over = board.Find("job-made-up", -1, "ticket", std::chrono::seconds(10));
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted) << over.status();
  EXPECT_LT(std::chrono::steady_clock::now() - asked, std::chrono::milliseconds(100))
      << "refused at once, not after its wait";
  // A registered shard is found even now.
  auto real = std::make_shared<ShardTransfer>("secret", TokenReceiver({1}, 1, WireType::kF32, 0));
  board.Register("job-real", 0, real);
  EXPECT_TRUE(board.Find("job-real", 0, "secret", std::chrono::milliseconds(0)).ok());
  for (std::thread& t : waiting) t.join();
  EXPECT_EQ(not_found.load(), TransferBoard::kMaxWaiting);
  EXPECT_EQ(board.Find("job-made-up", 0, "ticket", std::chrono::milliseconds(10)).status().code(),
            absl::StatusCode::kNotFound)
      << "the waiters were counted out";
  board.Unregister("job-real", 0, real.get());
}

// A job that runs again has new tickets: its new shard of a rank may be
// registered here while the dead attempt's shard of that rank still is,
// and may come after the client's stream. Each stream meets the shard of
// its own ticket, and the old shard's end does not take the new one away.
TEST(TransferBoard, AReRunsShardIsMetBesideTheDeadAttemptsShard) {
  TransferBoard board;
  auto first = std::make_shared<ShardTransfer>("first", TokenReceiver({1}, 1, WireType::kF32, 0));
  auto again = std::make_shared<ShardTransfer>("again", TokenReceiver({1}, 1, WireType::kF32, 0));
  board.Register("job", 1, first);
  std::thread rerun([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    board.Register("job", 1, again);
  });
  absl::StatusOr<std::shared_ptr<ShardTransfer>> met =
      board.Find("job", 1, "again", std::chrono::seconds(10));
  rerun.join();
  ASSERT_TRUE(met.ok()) << met.status();
  EXPECT_EQ(met->get(), again.get()) << "the stream waited for its own attempt's shard";
  board.Unregister("job", 1, first.get());
  met = board.Find("job", 1, "again", std::chrono::milliseconds(0));
  ASSERT_TRUE(met.ok()) << "the dead attempt's end left the re-run's shard: " << met.status();
  EXPECT_EQ(met->get(), again.get());
  EXPECT_EQ(board.Find("job", 1, "first", std::chrono::milliseconds(10)).status().code(),
            absl::StatusCode::kPermissionDenied)
      << "the dead attempt's ticket no longer meets anything";
  board.Unregister("job", 1, again.get());
  EXPECT_EQ(board.Find("job", 1, "again", std::chrono::milliseconds(10)).status().code(),
            absl::StatusCode::kNotFound);
}

// A stream that comes after its shard failed (a cancel that reached the
// worker first) is told why at once, as one that came before would be;
// only with the shard's ticket, and only for a shard that failed.
// A cancel says how far the shard got: every phase is named.
TEST(ShardTransfer, ACancelNamesThePhaseItCameIn) {
  const auto cancelled_in = [](const std::function<void(ShardTransfer&)>& advance) {
    ShardTransfer transfer("t", TokenReceiver({1}, 1, WireType::kF32, 0));
    advance(transfer);
    transfer.Cancel();
    return std::string(transfer.failure().message());
  };
  EXPECT_EQ(cancelled_in([](ShardTransfer&) {}), "the job was cancelled during the upload");
  const auto uploaded = [](ShardTransfer& t) {
    ASSERT_TRUE(t.Attach(nullptr, kNoWait).ok());
    ASSERT_TRUE(t.Accept(Chunk(0, 0, {1})).ok());
    ASSERT_TRUE(t.EndUpload().ok());
  };
  EXPECT_EQ(cancelled_in(uploaded), "the job was cancelled while it computed");
  EXPECT_EQ(cancelled_in([&](ShardTransfer& t) {
              uploaded(t);
              t.Publish({0, 0, "", std::make_shared<const Tensor>(Tensor({1, 2}))});
            }),
            "the job was cancelled while its outputs were sent");
}

TEST(TransferBoard, AStreamAfterItsShardFailedIsToldWhy) {
  TransferBoard board;
  auto cancelled =
      std::make_shared<ShardTransfer>("secret", TokenReceiver({4}, 1, WireType::kF32, 0));
  board.Register("job", 0, cancelled);
  cancelled->Cancel();
  board.Unregister("job", 0, cancelled.get());
  const auto asked = std::chrono::steady_clock::now();
  const absl::Status late = board.Find("job", 0, "secret", std::chrono::seconds(10)).status();
  EXPECT_EQ(late.code(), absl::StatusCode::kCancelled) << late;
  EXPECT_THAT(std::string(late.message()), HasSubstr("the job was cancelled during the upload"));
  EXPECT_LT(std::chrono::steady_clock::now() - asked, std::chrono::seconds(1))
      << "at once, not after waiting for a shard";
  EXPECT_EQ(board.Find("job", 0, "other", std::chrono::milliseconds(10)).status().code(),
            absl::StatusCode::kNotFound)
      << "another ticket learns nothing of it";
  EXPECT_EQ(board.Find("job", 1, "secret", std::chrono::milliseconds(10)).status().code(),
            absl::StatusCode::kNotFound);
  auto succeeded =
      std::make_shared<ShardTransfer>("kept", TokenReceiver({4}, 1, WireType::kF32, 0));
  board.Register("ok", 0, succeeded);
  board.Unregister("ok", 0, succeeded.get());
  EXPECT_EQ(board.Find("ok", 0, "kept", std::chrono::milliseconds(10)).status().code(),
            absl::StatusCode::kNotFound);
  for (size_t i = 0; i < TransferBoard::kRememberedFailures; ++i) {
    auto t = std::make_shared<ShardTransfer>("t", TokenReceiver({1}, 1, WireType::kF32, 0));
    board.Register(absl::StrCat("filler-", i), 0, t);
    t->Abort(absl::InternalError("boom"));
    board.Unregister(absl::StrCat("filler-", i), 0, t.get());
  }
  EXPECT_EQ(board.Find("job", 0, "secret", std::chrono::milliseconds(10)).status().code(),
            absl::StatusCode::kNotFound)
      << "the oldest failures are forgotten";
}

TEST(ShardTransfer, UploadAndDownloadMeetAcrossThreads) {
  auto transfer =
      std::make_shared<ShardTransfer>("secret", TokenReceiver({2}, 1, WireType::kF32, 0));
  TransferBoard board;
  EXPECT_EQ(board.Find("job", 0, "secret", std::chrono::milliseconds(10)).status().code(),
            absl::StatusCode::kNotFound);
  board.Register("job", 0, transfer);
  EXPECT_EQ(board.Find("job", 0, "secreT", std::chrono::milliseconds(10)).status().code(),
            absl::StatusCode::kPermissionDenied);
  ASSERT_TRUE(board.Find("job", 0, "secret", std::chrono::milliseconds(10)).ok());

  std::vector<float> sent;
  std::thread client([&] {
    ASSERT_TRUE(transfer->Attach(nullptr, kNoWait).ok());
    ASSERT_TRUE(transfer->Accept(Chunk(0, 0, {1.5f, 2.5f})).ok());
    ASSERT_TRUE(transfer->EndUpload().ok());
    while (true) {
      absl::StatusOr<std::optional<ShardTransfer::Item>> item = transfer->NextItem();
      ASSERT_TRUE(item.ok());
      if (!item->has_value()) break;
      sent.insert(sent.end(), (*item)->tensor->data.begin(), (*item)->tensor->data.end());
    }
    transfer->DownloadDone();
  });
  ASSERT_TRUE(transfer->AwaitUpload(std::chrono::seconds(5)).ok());
  EXPECT_EQ(transfer->receiver().TakeSet(0).data, (std::vector<float>{1.5f, 2.5f}));
  EXPECT_EQ(transfer->Attach(nullptr, kNoWait).code(), absl::StatusCode::kFailedPrecondition)
      << "one stream per shard";
  auto rows = std::make_shared<const Tensor>(Tensor({1, 2}));
  transfer->Publish({0, 0, "", rows});
  transfer->Publish({1, 0, "", rows});
  transfer->EndPublishing();
  EXPECT_TRUE(transfer->AwaitDownload(std::chrono::seconds(5)).ok());
  client.join();
  EXPECT_EQ(sent.size(), 4u);
}

TEST(ShardTransfer, AStreamThatEndsBeforeItsFirstChunkFreesTheShard) {
  ShardTransfer transfer("t", TokenReceiver({2}, 1, WireType::kF32, 0));
  ASSERT_TRUE(transfer.Attach(nullptr, kNoWait).ok());
  // A second stream waits for the first to let go, and gets the shard once
  // it has.
  std::thread first([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_TRUE(transfer.Release()) << "no chunk came: the shard is free again";
  });
  EXPECT_TRUE(transfer.Attach(nullptr, std::chrono::seconds(10)).ok());
  first.join();
  ASSERT_TRUE(transfer.Accept(Chunk(0, 0, {1})).ok());
  EXPECT_FALSE(transfer.Release()) << "a stream that sent rows cannot hand over mid-set";
  EXPECT_EQ(transfer.Attach(nullptr, std::chrono::milliseconds(50)).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(transfer.Accept(Chunk(0, 1, {2})).ok());
  EXPECT_TRUE(transfer.EndUpload().ok());
  EXPECT_TRUE(transfer.AwaitUpload(std::chrono::seconds(5)).ok());
}

TEST(ShardTransfer, AStreamThatNeverComesOrStallsTimesOut) {
  ShardTransfer never("t", TokenReceiver({2}, 1, WireType::kF32, 0));
  absl::Status s = never.AwaitUpload(std::chrono::milliseconds(100));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(s.message()), HasSubstr("no Transfer stream from the client for 100 ms"));

  ShardTransfer stalled("t", TokenReceiver({2}, 1, WireType::kF32, 0));
  bool stream_cancelled = false;
  ASSERT_TRUE(stalled.Attach([&](const absl::Status&) { stream_cancelled = true; }, kNoWait).ok());
  ASSERT_TRUE(stalled.Accept(Chunk(0, 0, {1})).ok());
  s = stalled.AwaitUpload(std::chrono::milliseconds(100));
  EXPECT_THAT(std::string(s.message()), HasSubstr("no token chunk for 100 ms during the upload"));
  EXPECT_TRUE(stream_cancelled) << "the stalled stream is ended, not left blocked";
  EXPECT_EQ(stalled.Accept(Chunk(0, 1, {2})).code(), absl::StatusCode::kDeadlineExceeded);

  // A shard with nothing to upload publishes its results; no client comes.
  ShardTransfer unread("t", TokenReceiver({0}, 1, WireType::kF32, 0));
  unread.Publish({0, 0, "", std::make_shared<const Tensor>(Tensor({1, 2}))});
  unread.EndPublishing();
  s = unread.AwaitDownload(std::chrono::milliseconds(100));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("no Transfer stream from the client for 100 ms to take the results"));
}

TEST(ShardTransfer, FailuresReachTheOtherSide) {
  ShardTransfer bad("t", TokenReceiver({2}, 1, WireType::kF32, 0));
  ASSERT_TRUE(bad.Attach(nullptr, kNoWait).ok());
  EXPECT_FALSE(bad.Accept(Chunk(0, 1, {1})).ok());
  absl::Status s = bad.AwaitUpload(std::chrono::seconds(5));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("starts at token 1; expected token 0"));

  ShardTransfer aborted("t", TokenReceiver({1}, 1, WireType::kF32, 0));
  ASSERT_TRUE(aborted.Attach(nullptr, kNoWait).ok());
  ASSERT_TRUE(aborted.Accept(Chunk(0, 0, {1})).ok());
  ASSERT_TRUE(aborted.EndUpload().ok());
  std::thread runshard([&] { aborted.Abort(absl::UnavailableError("a peer died")); });
  absl::StatusOr<std::optional<ShardTransfer::Item>> item = aborted.NextItem();
  runshard.join();
  EXPECT_EQ(item.status().code(), absl::StatusCode::kUnavailable)
      << "the waiting stream wakes with the cause";

  // The coordinator's cancel wakes the wait when it comes, and ends the
  // client's stream.
  ShardTransfer cancelled("t", TokenReceiver({2}, 1, WireType::kF32, 0));
  bool stream_cancelled = false;
  ASSERT_TRUE(
      cancelled.Attach([&](const absl::Status&) { stream_cancelled = true; }, kNoWait).ok());
  ASSERT_TRUE(cancelled.Accept(Chunk(0, 0, {1})).ok());
  const auto start = std::chrono::steady_clock::now();
  std::thread coordinator([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    cancelled.Cancel();
  });
  s = cancelled.AwaitUpload(std::chrono::seconds(30));
  coordinator.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(std::string(s.message()), HasSubstr("cancelled during the upload"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_TRUE(stream_cancelled);
}

TEST(RetainedResults, ByteCapEvictsTheOldestAndSaysSo) {
  const ModelConfig config = *PresetConfig("small");
  auto state = std::make_shared<const FusedState>(ZeroFusedState(config));
  int64_t state_bytes = 0;
  for (const LayerState& l : state->layers) {
    state_bytes += (l.w0.size() + l.w1.size() + l.w2.size()) * 4;
    for (const MambaState& m : l.mamba) state_bytes += (m.ssm.size() + m.conv.size()) * 4;
  }
  ASSERT_GT(state_bytes, 0);
  auto rows = std::make_shared<const Tensor>(std::vector<int64_t>{100, 64});
  const int64_t one = state_bytes + rows->size() * 4;  // a rank 0 job: state and outputs
  RetainedResults results(one * 5 / 2);                // room for two
  const auto rank0 = [&] {
    return RetainedResult{"", "preset:small", {}, "t", 0, state, {{0, 0, "", rows}}};
  };
  for (const char* job : {"a", "b", "c"})
    ASSERT_TRUE(results.Put(job, rank0(), std::chrono::seconds(60)).ok());
  EXPECT_EQ(results.bytes(), 2 * one);
  absl::StatusOr<RetainedResult> evicted = results.Get("a");
  EXPECT_EQ(evicted.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(evicted.status().message()),
              HasSubstr(absl::StrCat("evicted: the worker's retained results reached its "
                                     "--retain-bytes ",
                                     one * 5 / 2, " (it held ", 2 * one,
                                     " bytes and a new job's results took ", one, ")")))
      << "the cap, and the bytes that passed it";
  ASSERT_TRUE(results.Get("b").ok());
  EXPECT_EQ(results.Get("b")->outputs.at(0).tensor, rows) << "retained, not copied";
  EXPECT_TRUE(results.Get("c").ok());
  EXPECT_THAT(std::string(results.Get("zz").status().message()), HasSubstr("never computed here"));
  EXPECT_EQ(results.Forget("c", "not-t").status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(*results.Forget("c", "t"));
  EXPECT_FALSE(*results.Forget("c", "t"));
  EXPECT_THAT(std::string(results.Get("c").status().message()), HasSubstr("deleted by DeleteJob"));
  EXPECT_EQ(results.bytes(), one) << "b is left";
  results.Put("d", rank0(), std::chrono::seconds(0)).IgnoreError();
  EXPECT_THAT(std::string(results.Get("d").status().message()), HasSubstr("expired"));
  ASSERT_TRUE(results
                  .Put("e", {"", "preset:small", {}, "t", 1, nullptr, {{0, 100, "", rows}}},
                       std::chrono::seconds(60))
                  .ok());
  EXPECT_EQ(results.bytes(), one + rows->size() * 4) << "a rank > 0 keeps only its outputs";
  // Outputs that reached their client are kept only for a grace; a rank 0
  // job keeps its state, and says where its outputs went.
  results.Delivered("b", std::chrono::seconds(0));
  results.Delivered("e", std::chrono::seconds(0));
  EXPECT_EQ(results.bytes(), state_bytes);
  ASSERT_TRUE(results.Get("b").ok());
  EXPECT_TRUE(results.Get("b")->outputs.empty());
  EXPECT_THAT(results.Get("b")->outputs_dropped, HasSubstr("they reached the job's client"));
  EXPECT_THAT(std::string(results.Get("e").status().message()),
              HasSubstr("they reached the job's client"));
  RetainedResults small(one / 2);
  const absl::Status too_big = small.Put("big", rank0(), std::chrono::seconds(60));
  EXPECT_EQ(too_big.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(small.bytes(), 0) << "the cap holds";
  EXPECT_THAT(std::string(small.Get("big").status().message()),
              HasSubstr(absl::StrCat("not retained: its ", one,
                                     " bytes exceed the worker's --retain-bytes ", one / 2)));
}

TEST(RetainedResults, ATenantEvictsItsOwnResultsBeforeAnotherTenantsAndTheDropsAreReported) {
  auto rows = std::make_shared<const Tensor>(std::vector<int64_t>{100, 64});
  const int64_t one = rows->size() * 4;
  const auto job = [&](const std::string& tenant) {
    return RetainedResult{tenant, "preset:small", {}, "t", 1, nullptr, {{0, 0, "", rows}}};
  };
  RetainedResults results(4 * one, 3 * one);  // 4 jobs in all, 3 of one tenant
  ASSERT_TRUE(results.Put("b1", job("b"), std::chrono::seconds(60)).ok());
  for (const char* id : {"a1", "a2", "a3", "a4", "a5", "a6"})
    ASSERT_TRUE(results.Put(id, job("a"), std::chrono::seconds(60)).ok());
  EXPECT_TRUE(results.Get("b1").ok()) << "tenant a's flood never pushed out tenant b's job";
  for (const char* id : {"a1", "a2", "a3"}) {
    EXPECT_THAT(std::string(results.Get(id).status().message()),
                HasSubstr("tenant 'a' reached the worker's --retain-bytes-per-tenant"))
        << id;
  }
  EXPECT_EQ(results.bytes(), 4 * one);
  // Over the worker's cap, the tenant holding the most gives way.
  ASSERT_TRUE(results.Put("b2", job("b"), std::chrono::seconds(60)).ok());
  EXPECT_THAT(std::string(results.Get("a4").status().message()),
              HasSubstr("tenant 'a' held the most"));
  EXPECT_TRUE(results.Get("b1").ok());
  // Each drop is handed on once; one the coordinator asked for is not.
  ASSERT_TRUE(*results.Forget("a5", "t"));
  // Each report carries the reason the worker's own fetch gives, so the
  // coordinator can say it in the same words.
  std::vector<std::string> reported;
  for (const DroppedJob& d : results.TakeDropped()) {
    reported.push_back(d.job_id);
    EXPECT_FALSE(d.state) << d.job_id << ": a rank > 0 keeps no state";
    EXPECT_THAT(d.why,
                HasSubstr(d.job_id == "a4" ? "tenant 'a' held the most"
                                           : "reached the worker's --retain-bytes-per-tenant"))
        << d.job_id;
    EXPECT_THAT(std::string(results.Get(d.job_id).status().message()), HasSubstr(d.why))
        << d.job_id;
  }
  EXPECT_EQ(reported, (std::vector<std::string>{"a1", "a2", "a3", "a4"}));
  EXPECT_TRUE(results.TakeDropped().empty());
  // Delivered: the context's outputs go, the query outputs stay.
  auto query = std::make_shared<const Tensor>(std::vector<int64_t>{10, 64});
  RetainedResult with_query = job("b");
  with_query.outputs.push_back({1, 0, "", query});
  ASSERT_TRUE(results.Put("b3", std::move(with_query), std::chrono::seconds(60)).ok());
  results.Delivered("b3", std::chrono::seconds(0));
  absl::StatusOr<RetainedResult> b3 = results.Get("b3");
  ASSERT_TRUE(b3.ok()) << b3.status();
  ASSERT_EQ(b3->outputs.size(), 1u);
  EXPECT_EQ(b3->outputs[0].set, 1);
  EXPECT_FALSE(b3->outputs_dropped.empty());
  bool b3_reported = false;
  for (const DroppedJob& d : results.TakeDropped()) {
    if (d.job_id != "b3") continue;  // b3's Put evicted others
    b3_reported = true;
    EXPECT_FALSE(d.state);
    EXPECT_EQ(d.why, b3->outputs_dropped);
  }
  EXPECT_TRUE(b3_reported) << "its context outputs' drop is reported";
  results.NotKept("x", "not kept: its shard here ended CANCELLED: the job was cancelled");
  EXPECT_THAT(std::string(results.Get("x").status().message()), HasSubstr("ended CANCELLED"));
}

}  // namespace
}  // namespace lact
