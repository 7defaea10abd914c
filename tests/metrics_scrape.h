// Reading a lact process's Prometheus endpoint in tests: a scrape of
// /metrics (checked for status 200 and the text format's content type), the
// HTTP status of another path, one sample's value.
#ifndef LACT_TESTS_METRICS_SCRAPE_H_
#define LACT_TESTS_METRICS_SCRAPE_H_

#include <string>

namespace lact::testing {

// A GET of http://ADDRESS/metrics: the body, or "" (and a test failure).
std::string Scrape(const std::string& address);

// The HTTP status of GET http://ADDRESS/PATH; -1 with no answer.
int HttpStatus(const std::string& address, const std::string& path);

// The value of the sample `series` (name and labels exactly as written,
// e.g. lact_jobs{status="running"}) in a scrape; -1 when it is missing.
double Sample(const std::string& scrape, const std::string& series);

}  // namespace lact::testing

#endif  // LACT_TESTS_METRICS_SCRAPE_H_
