// The wire dtypes' names, as docs/operating.md gives them for --dtype.
#include "common/token_codec.h"

#include <string>

#include "gtest/gtest.h"

namespace lact {
namespace {

TEST(WireTypeNames, EachNameNamesItsDtypeAndBack) {
  const struct {
    const char* name;
    WireType type;
    int bytes;
  } cases[] = {
      {"f32", WireType::kF32, 4}, {"bf16", WireType::kBF16, 2}, {"f16", WireType::kF16, 2}};
  for (const auto& c : cases) {
    EXPECT_STREQ(WireTypeName(c.type), c.name);
    absl::StatusOr<WireType> named = WireTypeNamed(c.name, "--dtype");
    ASSERT_TRUE(named.ok()) << named.status();
    EXPECT_EQ(*named, c.type);
    EXPECT_EQ(WireBytes(*named), c.bytes);
  }
}

TEST(WireTypeNames, AnyOtherNameIsRefusedNamingWhereItCameFromAndTheNamesAllowed) {
  for (const char* name : {"", "F32", "fp32", "bfloat16", "f64", "f32 "}) {
    absl::StatusOr<WireType> named = WireTypeNamed(name, "--dtype");
    ASSERT_FALSE(named.ok()) << name;
    EXPECT_EQ(named.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(named.status().message(),
              std::string("--dtype '") + name + "' (allowed: f32, bf16, f16)");
  }
}

}  // namespace
}  // namespace lact
