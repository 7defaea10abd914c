#include "common/flags.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lact {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<Flags> ParseLine(std::vector<std::string> args) {
  return Flags::Parse(args, {"model", "out", "seed", "query"}, {"query"}, {"tls", "detach"});
}

TEST(FlagsTest, ValuesSpacedOrJoinedAndSwitches) {
  absl::StatusOr<Flags> f = ParseLine({"--model", "preset:small", "--out=x.safetensors", "--tls",
                                       "--seed", "-3", "--query", "a", "--query=b"});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->Get("model"), "preset:small");
  EXPECT_EQ(f->Get("out"), "x.safetensors");
  EXPECT_TRUE(f->Has("tls"));
  EXPECT_FALSE(f->Has("detach"));
  EXPECT_EQ(f->Int("seed", 0, -10, 10).value(), -3);
  EXPECT_THAT(f->GetAll("query"), ::testing::ElementsAre("a", "b"));
}

TEST(FlagsTest, SwitchSetFalseIsAbsent) {
  absl::StatusOr<Flags> f = ParseLine({"--tls=false", "--detach=true"});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_FALSE(f->Has("tls"));
  EXPECT_TRUE(f->Has("detach"));
}

TEST(FlagsTest, BadLinesNameTheFlag) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"--colour", "red"},
       "unknown flag --colour (allowed: --detach, --model, --out, --query, --seed, --tls)"},
      {{"--colour=red"}, "unknown flag --colour (allowed:"},
      {{"-m", "x"}, "unknown flag -m (allowed:"},
      {{"stray"}, "unexpected argument 'stray' (flags are --name VALUE)"},
      {{"--model", "a", "b"}, "unexpected argument 'b'"},
      {{"--model"}, "flag --model needs a value"},
      {{"--model", "a", "--model", "b"}, "flag --model given more than once"},
      {{"--tls", "--tls"}, "flag --tls given more than once"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<Flags> f = ParseLine(c.args);
    ASSERT_FALSE(f.ok()) << c.args.front();
    EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(f.status().message()), HasSubstr(c.message));
  }
}

TEST(FlagsTest, IntegersOutsideTheirRangeNameTheRange) {
  absl::StatusOr<Flags> f = ParseLine({"--seed", "11"});
  ASSERT_TRUE(f.ok());
  EXPECT_THAT(std::string(f->Int("seed", 0, 0, 10).status().message()),
              HasSubstr("--seed '11' must be an integer in [0, 10]"));
  EXPECT_EQ(f->Int("missing", 7, 0, 10).value(), 7);
  EXPECT_THAT(std::string(f->Required("model").status().message()),
              HasSubstr("missing required flag --model"));
  absl::StatusOr<Flags> g = ParseLine({"--seed", "x1"});
  EXPECT_FALSE(g->Int("seed", 0, 0, 10).ok());
}

}  // namespace
}  // namespace lact
