// The results' checksum against CRC-32C's published check value and its
// defining property, and the tally's verdicts on a stream that matches, is
// short, or changed on the way.
#include "proto/result_tally.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace lact {
namespace {

using ::testing::HasSubstr;

TEST(Crc32c, MatchesTheCheckValueAndExtends) {
  // The check value of CRC-32C (RFC 3720, B.4; the Rocksoft catalogue).
  EXPECT_EQ(Crc32c(0, "123456789"), 0xE3069283u);
  EXPECT_EQ(Crc32c(0, ""), 0u);
  // RFC 3720 B.4: 32 bytes of zeros.
  EXPECT_EQ(Crc32c(0, std::string(32, '\0')), 0x8A9136AAu);
  const std::string whole = "the outputs of a shard, in order";
  EXPECT_EQ(Crc32c(Crc32c(0, whole.substr(0, 11)), whole.substr(11)), Crc32c(0, whole));
}

TEST(ResultTally, ChecksWhatArrivedAgainstWhatWasSent) {
  ResultTally sent;
  sent.Add("rows 0..3");
  sent.Add("rows 4..7");
  const v1::TransferComplete complete = sent.Complete();
  EXPECT_EQ(complete.messages(), 2);
  EXPECT_EQ(complete.bytes(), 18);

  ResultTally same;
  same.Add(std::vector<absl::string_view>{"rows ", "0..3"});
  same.Add("rows 4..7");
  EXPECT_TRUE(same.Check(complete).ok());

  ResultTally short_one;
  short_one.Add("rows 0..3");
  const absl::Status shorter = short_one.Check(complete);
  EXPECT_EQ(shorter.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(shorter.message(), HasSubstr("sent 2 messages of 18 bytes; 1 messages of 9"));

  ResultTally flipped;
  flipped.Add("rows 0..3");
  flipped.Add("rows 4..6");
  const absl::Status changed = flipped.Check(complete);
  EXPECT_EQ(changed.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(changed.message(), HasSubstr("bytes changed on the way"));
}

}  // namespace
}  // namespace lact
