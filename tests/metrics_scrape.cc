#include "tests/metrics_scrape.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>

namespace lact::testing {

std::string Scrape(const std::string& address) {
  const size_t colon = address.rfind(':');
  httplib::Client http(address.substr(0, colon), std::stoi(address.substr(colon + 1)));
  httplib::Result response = http.Get("/metrics");
  EXPECT_TRUE(response) << "no answer from " << address;
  if (!response) return "";
  EXPECT_EQ(response->status, 200) << address;
  EXPECT_THAT(response->get_header_value("Content-Type"),
              ::testing::HasSubstr("text/plain; version=0.0.4"));
  return response->body;
}

int HttpStatus(const std::string& address, const std::string& path) {
  const size_t colon = address.rfind(':');
  httplib::Client http(address.substr(0, colon), std::stoi(address.substr(colon + 1)));
  httplib::Result response = http.Get(path);
  return response ? response->status : -1;
}

double Sample(const std::string& scrape, const std::string& series) {
  const std::string line_start = series + " ";
  for (size_t at = 0; at < scrape.size();) {
    const size_t end = std::min(scrape.find('\n', at), scrape.size());
    if (scrape.compare(at, line_start.size(), line_start) == 0)
      return std::stod(scrape.substr(at + line_start.size(), end - at - line_start.size()));
    at = end + 1;
  }
  return -1;
}

}  // namespace lact::testing
