// The coordinator's job records on disk: one SQLite database
// (STATE_DIR/jobs.sqlite3, write-ahead log) holding each record's JobInfo,
// where its retained fused state is (model, worker) and until when, when
// the record may be forgotten, and its JobRecord (job_record.proto: what
// a restarted coordinator needs to take a live job back, and the request
// id a client's Submit made again names). The JobStore writes a record at every change of status,
// retention or attempt and reads them all back when the coordinator
// starts, so job records, retained states and running jobs outlive a
// coordinator restart (the states and the shards stay on their workers).
// Thread-compatible: the JobStore calls it under its own lock.
#ifndef LACT_SERVER_JOB_JOURNAL_H_
#define LACT_SERVER_JOB_JOURNAL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lact/v1/coordinator.pb.h"

struct sqlite3;

namespace lact::server {

struct JournalRecord {
  std::string id;
  uint64_t sequence = 0;
  v1::JobInfo info;
  std::string model, worker;    // of the retained state; empty = none
  int64_t expires_us = 0;       // the state's expiry, microseconds since the epoch
  int64_t forget_after_us = 0;  // the record's, once the job ended; 0 = not yet
  std::string run;              // a serialized JobRecord (empty in older journals)
};

class JobJournal {
 public:
  // Opens (or creates) STATE_DIR/jobs.sqlite3; the folder must exist.
  // INTERNAL naming the file and SQLite's message on failure.
  static absl::StatusOr<std::unique_ptr<JobJournal>> Open(const std::string& state_dir);
  ~JobJournal();
  JobJournal(const JobJournal&) = delete;
  JobJournal& operator=(const JobJournal&) = delete;

  absl::Status Put(const JournalRecord& record);
  absl::Status Erase(const std::string& id);
  absl::StatusOr<std::vector<JournalRecord>> LoadAll();

 private:
  JobJournal(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  absl::Status Error(const char* what) const;

  sqlite3* db_;
  const std::string path_;
};

}  // namespace lact::server

#endif  // LACT_SERVER_JOB_JOURNAL_H_
