// Every load and parse error names the problem: safetensors files (missing,
// truncated, bad header, bad dtype, bad offsets), models (missing, extra and
// mis-shaped tensors, missing or bad config), npy files, tokens given to the
// runner, job options. Also: BF16 and F16 weights load upcast.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/half.h"
#include "common/model.h"
#include "common/npy.h"
#include "common/safetensors.h"
#include "nlohmann/json.hpp"
#include "tests/golden_case.h"
#include "tests/random_model.h"
#include "worker/cpu/cpu_runner.h"

namespace lact::testing {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

std::string TempPath(const std::string& name) {
  return absl::StrCat(::testing::TempDir(), "/lact_", getpid(), "_", name);
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), bytes.size());
}

std::string SafetensorsBytes(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return out + header + data;
}

template <typename T>
std::string ErrorOf(const absl::StatusOr<T>& s) {
  return s.ok() ? "(no error)" : std::string(s.status().message());
}

TEST(SafetensorsErrors, MissingFile) {
  auto st = SafetensorsFile::Open("/nonexistent/model.safetensors");
  EXPECT_EQ(st.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(ErrorOf(st), HasSubstr("/nonexistent/model.safetensors"));
}

TEST(SafetensorsErrors, MalformedFiles) {
  const std::string path = TempPath("bad.safetensors");
  const std::string ok_entry = R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  struct Case {
    std::string bytes, message;
  } cases[] = {
      {"abc", "shorter than the 8-byte header length"},
      {SafetensorsBytes(ok_entry, "12345678").substr(0, 20), "exceeds the file size"},
      {SafetensorsBytes("{not json", ""), "header is not a JSON object"},
      {SafetensorsBytes(R"({"t":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}})", "12345678"),
       "tensor 't': unsupported dtype \"I32\" (allowed: F32, F16, BF16, F64)"},
      {SafetensorsBytes(ok_entry, "1234"),
       "tensor 't': data_offsets [0, 8) outside the 4-byte data section"},
      {SafetensorsBytes(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", "12345678"),
       "tensor 't': has 8 bytes but shape [3] of F32 needs 12"},
      {SafetensorsBytes(R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", "12345678"),
       "shape entries must be non-negative integers"},
      {SafetensorsBytes(R"({"t":{"dtype":"F32","shape":[2]}})", "12345678"),
       "needs dtype, shape and data_offsets"},
  };
  for (const Case& c : cases) {
    WriteBytes(path, c.bytes);
    auto st = SafetensorsFile::Open(path);
    EXPECT_EQ(st.status().code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(ErrorOf(st), HasSubstr(c.message));
    EXPECT_THAT(ErrorOf(st), HasSubstr(path));
  }
  std::remove(path.c_str());
}

// A model file built from the golden `tiny` model, with edits.
class ModelFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto golden = LoadGoldenCase("tiny");
    ASSERT_TRUE(golden.ok()) << golden.status();
    config_ = golden->model.config();
    tensors_ = golden->model.tensors();
    path_ = TempPath("model.safetensors");
  }
  void TearDown() override { std::remove(path_.c_str()); }

  // Writes tensors_ with `dtype` (F32, BF16 or F16) and the given config text.
  void Write(const std::string& dtype, const std::optional<std::string>& config_json) {
    json header = json::object();
    if (config_json) header["__metadata__"] = {{"lact.config", *config_json}};
    std::string data;
    for (const auto& [name, t] : tensors_) {
      const size_t begin = data.size();
      for (float v : t.data) {
        if (dtype == "F32") {
          data.append(reinterpret_cast<const char*>(&v), 4);
        } else {
          uint32_t bits;
          std::memcpy(&bits, &v, 4);
          const uint16_t h = dtype == "BF16" ? static_cast<uint16_t>(bits >> 16) : FloatToHalf(v);
          data.append(reinterpret_cast<const char*>(&h), 2);
        }
      }
      header[name] = {{"dtype", dtype}, {"shape", t.shape}, {"data_offsets", {begin, data.size()}}};
    }
    WriteBytes(path_, SafetensorsBytes(header.dump(), data));
  }

  ModelConfig config_;
  std::map<std::string, Tensor> tensors_;
  std::string path_;
};

TEST_F(ModelFileTest, LoadsF32) {
  Write("F32", ModelConfigToJson(config_));
  auto model = LoadModel(path_);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->tensors().at("layers.0.ttt.w0").data, tensors_.at("layers.0.ttt.w0").data);
}

TEST_F(ModelFileTest, LoadsBf16AndF16Upcast) {
  for (const char* dtype : {"BF16", "F16"}) {
    Write(dtype, ModelConfigToJson(config_));
    auto model = LoadModel(path_);
    ASSERT_TRUE(model.ok()) << dtype << ": " << model.status();
    const Tensor& got = model->tensors().at("layers.1.mlp.up.weight");
    const Tensor& want = tensors_.at("layers.1.mlp.up.weight");
    for (int64_t i = 0; i < want.size(); ++i) {
      EXPECT_NEAR(got.data[i], want.data[i], std::abs(want.data[i]) * 1e-2 + 1e-6) << dtype;
    }
  }
}

TEST_F(ModelFileTest, MissingTensor) {
  tensors_.erase("layers.1.ttt.o_norm.weight");
  Write("F32", ModelConfigToJson(config_));
  EXPECT_THAT(ErrorOf(LoadModel(path_)),
              HasSubstr("missing tensor 'layers.1.ttt.o_norm.weight' (shape [16])"));
}

TEST_F(ModelFileTest, ExtraTensor) {
  tensors_["layers.0.bonus"] = Tensor({2});
  Write("F32", ModelConfigToJson(config_));
  EXPECT_THAT(ErrorOf(LoadModel(path_)), HasSubstr("unexpected tensor 'layers.0.bonus'"));
}

TEST_F(ModelFileTest, MisShapedTensor) {
  tensors_["layers.0.mamba.fwd.A_log"] = Tensor({7});
  Write("F32", ModelConfigToJson(config_));
  EXPECT_THAT(ErrorOf(LoadModel(path_)),
              HasSubstr("tensor 'layers.0.mamba.fwd.A_log' has shape [7], expected [8]"));
}

TEST_F(ModelFileTest, MissingConfig) {
  Write("F32", std::nullopt);
  EXPECT_THAT(ErrorOf(LoadModel(path_)), HasSubstr("no __metadata__[\"lact.config\"]"));
}

TEST_F(ModelFileTest, TruncatedFile) {
  Write("F32", ModelConfigToJson(config_));
  std::ifstream in(path_, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  WriteBytes(path_, bytes.substr(0, bytes.size() - 100));
  EXPECT_THAT(ErrorOf(LoadModel(path_)), HasSubstr("(truncated file?)"));
}

TEST_F(ModelFileTest, BadConfigs) {
  json base = json::parse(ModelConfigToJson(config_));
  struct Case {
    std::function<void(json&)> edit;
    std::string message;
  } cases[] = {
      {[](json& j) { j.erase("d_model"); }, "missing field 'd_model'"},
      {[](json& j) { j["ssm"].erase("d_state"); }, "missing field 'ssm.d_state'"},
      {[](json& j) { j["colour"] = 3; }, "unknown field 'colour'"},
      {[](json& j) { j["ttt"]["lr"] = 3; }, "unknown field 'ttt.lr'"},
      {[](json& j) { j["n_layers"] = "two"; }, "'n_layers' must be an integer, got \"two\""},
      {[](json& j) { j["d_model"] = 0; }, "'d_model' = 0 must be >= 1"},
      {[](json& j) { j["ssm"]["head_dim"] = 5; },
       "ssm.head_dim 5 must divide d_inner = expand * d_model = 64"},
      {[](json& j) { j["ttt"]["head_dim"] = 5; }, "ttt.head_dim 5 must divide d_model 32"},
      {[](json& j) { j["ttt"]["base_lr"] = -1; },
       "ttt.base_lr -1 must be a positive finite number"},
      {[](json& j) { j["ttt"]["normalize_update"] = 1; },
       "'ttt.normalize_update' must be true or false, got 1"},
      {[](json& j) { j["ttt"]["ns_precision"] = "fp16"; },
       "'ttt.ns_precision' = \"fp16\" (allowed: \"float32\", \"bf16\")"},
  };
  for (const Case& c : cases) {
    json j = base;
    c.edit(j);
    Write("F32", j.dump());
    EXPECT_THAT(ErrorOf(LoadModel(path_)), HasSubstr(c.message));
  }
  Write("F32", "{oops");
  EXPECT_THAT(ErrorOf(LoadModel(path_)), HasSubstr("model config: not valid JSON"));
}

// The update-rule fields are optional, off by default, and written back only
// when on, so configs without them keep their JSON.
TEST(ModelConfigJson, UpdateRuleFieldsAreOptionalAndRoundTrip) {
  ModelConfig c;
  const std::string plain = ModelConfigToJson(c);
  EXPECT_EQ(plain.find("normalize_update"), std::string::npos);
  EXPECT_EQ(plain.find("ns_precision"), std::string::npos);
  absl::StatusOr<ModelConfig> parsed = ParseModelConfig(plain);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_FALSE(parsed->ttt.normalize_update);
  EXPECT_FALSE(parsed->ttt.ns_bf16);
  c.ttt.normalize_update = true;
  c.ttt.ns_bf16 = true;
  parsed = ParseModelConfig(ModelConfigToJson(c));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(parsed->ttt.normalize_update);
  EXPECT_TRUE(parsed->ttt.ns_bf16);
  json j = json::parse(ModelConfigToJson(c));
  j["ttt"]["ns_precision"] = "float32";
  parsed = ParseModelConfig(j.dump());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_FALSE(parsed->ttt.ns_bf16);
}

TEST(PresetErrors, UnknownPresetAndBadSeed) {
  EXPECT_THAT(ErrorOf(ResolveModel("preset:huge")),
              HasSubstr("unknown preset 'huge' (allowed: small, base)"));
  EXPECT_THAT(ErrorOf(ResolveModel("preset:small:x")), HasSubstr("expected preset:NAME[:SEED]"));
  auto a = ResolveModel("preset:small:3"), b = ResolveModel("preset:small:3"),
       c = ResolveModel("preset:small:4");
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->tensors().at("layers.1.ttt.w1").data, b->tensors().at("layers.1.ttt.w1").data);
  EXPECT_NE(a->tensors().at("layers.1.ttt.w1").data, c->tensors().at("layers.1.ttt.w1").data);
}

std::string NpyBytes(const std::string& dict, const std::string& payload, int version = 1) {
  std::string out = "\x93NUMPY";
  out += static_cast<char>(version);
  out += '\0';
  out += static_cast<char>(dict.size() & 0xff);
  out += static_cast<char>(dict.size() >> 8);
  return out + dict + payload;
}

TEST(NpyErrors, MalformedFiles) {
  const std::string path = TempPath("bad.npy");
  const std::string payload(8, '\0');
  struct Case {
    std::string bytes, message;
  } cases[] = {
      {"PK\x03\x04 not npy", "not a .npy file (bad magic)"},
      {NpyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", payload, 7),
       "unsupported format version 7"},
      {NpyBytes("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", payload),
       "Fortran-order"},
      {NpyBytes("{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }", payload),
       "dtype '<f8' is not supported (allowed: little-endian float32 <f4, float16 <f2)"},
      {NpyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", payload),
       "payload is 8 bytes but shape [3] needs 12"},
      {NpyBytes("{'descr': '<f4', 'shape': (2,), }", payload),
       "header lacks descr, fortran_order or shape"},
      {NpyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (x,), }", payload),
       "is not a tuple"},
      // Crafted shapes in a small file: refused before anything is allocated
      // (these once overflowed the element count, or threw bad_alloc).
      {NpyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (72057594037927936, 256), }",
                payload),
       "shape [72057594037927936, 256] has more than 2^60 elements"},
      {NpyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 256), }", payload),
       "payload is 8 bytes but shape [4294967296, 256] needs 4398046511104 (truncated?)"},
      {NpyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1), }", payload),
       "payload is 8 bytes but shape [1, 1] needs 4"},
  };
  for (const Case& c : cases) {
    WriteBytes(path, c.bytes);
    auto t = ReadNpy(path);
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(ErrorOf(t), HasSubstr(c.message));
  }
  std::remove(path.c_str());
}

TEST(Npy, ElementCountsNeverOverflow) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(CheckedNumElements({3, 4}, 12), 12);
  EXPECT_EQ(CheckedNumElements({3, 4}, 11), -1);
  EXPECT_EQ(CheckedNumElements({}, 1), 1);
  EXPECT_EQ(CheckedNumElements({int64_t{1} << 62, 0}, 5), 0);
  EXPECT_EQ(CheckedNumElements({2, -1}, kMax), -1);
  EXPECT_EQ(CheckedNumElements({int64_t{1} << 31, int64_t{1} << 31}, kMax), int64_t{1} << 62);
  EXPECT_EQ(CheckedNumElements({int64_t{1} << 32, int64_t{1} << 31}, kMax), -1) << "2^63";
  EXPECT_EQ(CheckedNumElements({int64_t{1} << 62, 4, 0}, kMax), 0);
}

TEST(Npy, RoundTripAndFloat16) {
  const std::string path = TempPath("rt.npy");
  Tensor t({3, 2});
  for (int i = 0; i < 6; ++i) t.data[i] = 0.5f * i - 1.0f;
  ASSERT_TRUE(WriteNpy(path, t).ok());
  auto back = ReadNpy(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->shape, t.shape);
  EXPECT_EQ(back->data, t.data);
  std::string half;
  for (float v : t.data) {
    const uint16_t h = FloatToHalf(v);
    half.append(reinterpret_cast<const char*>(&h), 2);
  }
  WriteBytes(path, NpyBytes("{'descr': '<f2', 'fortran_order': False, 'shape': (3, 2), }", half));
  auto h = ReadNpy(path);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->data, t.data);  // these values are exact in float16
  std::remove(path.c_str());
}

ModelConfig SmallConfig() {
  return {.d_model = 16,
          .ssm = {.head_dim = 8, .d_state = 4},
          .ttt = {.head_dim = 8},
          .mlp_hidden = 16};
}

TEST(RunnerErrors, BadTokens) {
  const ModelConfig c = SmallConfig();
  Model model = RandomTestModel(c, 1);
  CpuRunner runner(model, c, {});
  FusedState state;
  EXPECT_THAT(ErrorOf(runner.RunContext(Tensor({4, 15}), &state)),
              HasSubstr("context has shape [4, 15]; the model takes [L, 16] tokens"));
  EXPECT_THAT(ErrorOf(runner.RunContext(Tensor({0, 16}), &state)),
              HasSubstr("context has no tokens"));
  Tensor nan = RandomTokens(3, 16, 1);
  nan.data[2 * 16 + 5] = std::nanf("");
  EXPECT_THAT(ErrorOf(runner.RunContext(nan, &state)),
              HasSubstr("context: token 2 feature 5 is nan; tokens must be finite"));
  ASSERT_TRUE(runner.RunContext(RandomTokens(3, 16, 1), &state).ok());
  EXPECT_THAT(ErrorOf(runner.RunQuery(Tensor({2, 3}), state)),
              HasSubstr("query set has shape [2, 3]"));
}

TEST(RunnerCancellation, StopsBetweenTiles) {
  const ModelConfig c = SmallConfig();
  Model model = RandomTestModel(c, 1);
  int polls = 0;
  // One-token tiles: the first layer alone polls hundreds of times; stop on the 5th.
  CpuRunner runner(model, c, {.threads = 1, .tile_tokens = 1},
                   {.cancelled = [&] { return ++polls >= 5; }});
  FusedState state;
  absl::StatusOr<Tensor> out = runner.RunContext(RandomTokens(300, 16, 2), &state);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kCancelled) << out.status();
  EXPECT_LT(polls, 20) << "the runner kept computing after it was cancelled";
}

TEST(RunnerOutputStream, RowsComeTileByTileInOrderAndEqualTheWholeOutput) {
  for (bool head : {false, true}) {
    ModelConfig c = SmallConfig();
    if (head) c.d_output = 5;
    Model model = RandomTestModel(c, 3);
    const Tensor tokens = RandomTokens(30, 16, 4);
    FusedState whole_state, streamed_state;
    CpuRunner plain(model, c, {.threads = 1, .tile_tokens = 7});
    absl::StatusOr<Tensor> whole = plain.RunContext(tokens, &whole_state);
    ASSERT_TRUE(whole.ok()) << whole.status();
    Tensor joined({30, c.output_width()});
    int64_t next = 0;
    std::vector<RowSlice> slices;
    CpuRunner streaming(
        model, c, {.threads = 1, .tile_tokens = 7}, {.on_output_rows = [&](RowSlice rows) {
          EXPECT_EQ(rows.first, next) << "rows out of order";
          EXPECT_LE(rows.n, 7) << "more than a tile at once";
          EXPECT_EQ(rows.width(), c.output_width());
          std::copy_n(rows.data(), rows.size(), joined.ptr() + rows.first * c.output_width());
          next = rows.first + rows.n;
          slices.push_back(rows);
          return absl::OkStatus();
        }});
    absl::StatusOr<Tensor> rest = streaming.RunContext(tokens, &streamed_state);
    ASSERT_TRUE(rest.ok()) << rest.status();
    EXPECT_EQ(rest->size(), 0) << "the rows went to the hook";
    EXPECT_EQ(next, 30);
    EXPECT_TRUE(joined.data == whole->data) << (head ? "with a head" : "without a head");
    // The rows handed over stay as they were (they are sent while the
    // run goes on), after the runner has moved on to other sequences too.
    absl::StatusOr<Tensor> again = streaming.RunQuery(RandomTokens(9, 16, 6), streamed_state);
    ASSERT_TRUE(again.ok()) << again.status();
    for (const RowSlice& s : slices) {
      EXPECT_TRUE(std::equal(s.data(), s.data() + s.size(), joined.ptr() + s.first * s.width()))
          << "rows from " << s.first << " changed after they were handed over";
    }
    EXPECT_TRUE(streamed_state.layers[1].w0.data == whole_state.layers[1].w0.data);
    // Query sets come back whole, the hook notwithstanding.
    absl::StatusOr<Tensor> query = streaming.RunQuery(RandomTokens(5, 16, 5), streamed_state);
    ASSERT_TRUE(query.ok()) << query.status();
    EXPECT_EQ(query->shape, (std::vector<int64_t>{5, c.output_width()}));
    EXPECT_EQ(next, 30);
  }
}

TEST(RunnerOutputStream, AHookThatFailsStopsTheRun) {
  const ModelConfig c = SmallConfig();
  Model model = RandomTestModel(c, 1);
  int calls = 0;
  CpuRunner runner(model, c, {.threads = 1, .tile_tokens = 4}, {.on_output_rows = [&](RowSlice) {
                     return ++calls == 2 ? absl::DataLossError("disk gone") : absl::OkStatus();
                   }});
  FusedState state;
  absl::StatusOr<Tensor> out = runner.RunContext(RandomTokens(20, 16, 2), &state);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kDataLoss) << out.status();
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("layer 2 of 2: disk gone"));
  EXPECT_EQ(calls, 2) << "the run went on after its outputs failed";
}

TEST(JobOptionErrors, OutOfRange) {
  ModelConfig c;
  EXPECT_THAT(ErrorOf(ApplyJobOptions(c, {std::optional<int>(-1), std::nullopt})),
              HasSubstr("muon_steps -1 is out of range (allowed: 0..100)"));
  EXPECT_THAT(ErrorOf(ApplyJobOptions(c, {std::nullopt, std::optional<int>(-5)})),
              HasSubstr("chunk_tokens -5 must be >= 0"));
  EXPECT_THAT(
      ErrorOf(ParseJobOptions(R"({"d_model": 3})")),
      HasSubstr("unknown field 'd_model' (a job may override only muon_steps and chunk_tokens)"));
}

}  // namespace
}  // namespace lact::testing
