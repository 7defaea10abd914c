#include "server/job_journal.h"

#include <sqlite3.h>

#include "absl/strings/str_cat.h"

namespace lact::server {
namespace {

// Finalizes a prepared statement at scope exit.
class Statement {
 public:
  Statement(sqlite3* db, const char* sql) { sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr); }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  sqlite3_stmt* get() const { return stmt_; }

 private:
  sqlite3_stmt* stmt_ = nullptr;
};

std::string Column(sqlite3_stmt* stmt, int i) {
  const void* data = sqlite3_column_blob(stmt, i);
  return data == nullptr ? std::string()
                         : std::string(static_cast<const char*>(data),
                                       static_cast<size_t>(sqlite3_column_bytes(stmt, i)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<JobJournal>> JobJournal::Open(const std::string& state_dir) {
  const std::string path = state_dir + "/jobs.sqlite3";
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                      nullptr) != SQLITE_OK) {
    const std::string message = db != nullptr ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return absl::InternalError(absl::StrCat("cannot open the job journal '", path, "': ", message));
  }
  auto journal = std::unique_ptr<JobJournal>(new JobJournal(db, path));
  const char* setup =
      "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
      "CREATE TABLE IF NOT EXISTS jobs (id TEXT PRIMARY KEY, sequence INTEGER NOT NULL,"
      " info BLOB NOT NULL, model TEXT NOT NULL, worker TEXT NOT NULL,"
      " expires_us INTEGER NOT NULL, forget_after_us INTEGER NOT NULL)";
  if (sqlite3_exec(db, setup, nullptr, nullptr, nullptr) != SQLITE_OK) {
    return journal->Error("creating its table");
  }
  // A journal written before jobs outlived the coordinator has no `run`.
  if (sqlite3_exec(db, "SELECT run FROM jobs LIMIT 0", nullptr, nullptr, nullptr) != SQLITE_OK &&
      sqlite3_exec(db, "ALTER TABLE jobs ADD COLUMN run BLOB NOT NULL DEFAULT x''", nullptr,
                   nullptr, nullptr) != SQLITE_OK) {
    return journal->Error("adding its run column");
  }
  return journal;
}

JobJournal::~JobJournal() { sqlite3_close(db_); }

absl::Status JobJournal::Error(const char* what) const {
  return absl::InternalError(
      absl::StrCat("job journal '", path_, "': ", what, ": ", sqlite3_errmsg(db_)));
}

absl::Status JobJournal::Put(const JournalRecord& r) {
  Statement stmt(db_,
                 "INSERT OR REPLACE INTO jobs (id, sequence, info, model, worker, expires_us,"
                 " forget_after_us, run) VALUES (?, ?, ?, ?, ?, ?, ?, ?)");
  if (stmt.get() == nullptr) return Error("preparing a write");
  const std::string info = r.info.SerializeAsString();
  sqlite3_bind_text(stmt.get(), 1, r.id.data(), static_cast<int>(r.id.size()), SQLITE_STATIC);
  sqlite3_bind_int64(stmt.get(), 2, static_cast<sqlite3_int64>(r.sequence));
  sqlite3_bind_blob(stmt.get(), 3, info.data(), static_cast<int>(info.size()), SQLITE_STATIC);
  sqlite3_bind_text(stmt.get(), 4, r.model.data(), static_cast<int>(r.model.size()), SQLITE_STATIC);
  sqlite3_bind_text(stmt.get(), 5, r.worker.data(), static_cast<int>(r.worker.size()),
                    SQLITE_STATIC);
  sqlite3_bind_int64(stmt.get(), 6, r.expires_us);
  sqlite3_bind_int64(stmt.get(), 7, r.forget_after_us);
  sqlite3_bind_blob(stmt.get(), 8, r.run.data(), static_cast<int>(r.run.size()), SQLITE_STATIC);
  if (sqlite3_step(stmt.get()) != SQLITE_DONE) return Error("writing a record");
  return absl::OkStatus();
}

absl::Status JobJournal::Erase(const std::string& id) {
  Statement stmt(db_, "DELETE FROM jobs WHERE id = ?");
  if (stmt.get() == nullptr) return Error("preparing a delete");
  sqlite3_bind_text(stmt.get(), 1, id.data(), static_cast<int>(id.size()), SQLITE_STATIC);
  if (sqlite3_step(stmt.get()) != SQLITE_DONE) return Error("deleting a record");
  return absl::OkStatus();
}

absl::StatusOr<std::vector<JournalRecord>> JobJournal::LoadAll() {
  Statement stmt(
      db_,
      "SELECT id, sequence, info, model, worker, expires_us, forget_after_us, run FROM jobs"
      " ORDER BY sequence");
  if (stmt.get() == nullptr) return Error("preparing a read");
  std::vector<JournalRecord> records;
  int rc;
  while ((rc = sqlite3_step(stmt.get())) == SQLITE_ROW) {
    JournalRecord r;
    r.id = Column(stmt.get(), 0);
    r.sequence = static_cast<uint64_t>(sqlite3_column_int64(stmt.get(), 1));
    if (!r.info.ParseFromString(Column(stmt.get(), 2))) {
      return absl::DataLossError(
          absl::StrCat("job journal '", path_, "': the record of '", r.id, "' does not parse"));
    }
    r.model = Column(stmt.get(), 3);
    r.worker = Column(stmt.get(), 4);
    r.expires_us = sqlite3_column_int64(stmt.get(), 5);
    r.forget_after_us = sqlite3_column_int64(stmt.get(), 6);
    r.run = Column(stmt.get(), 7);
    records.push_back(std::move(r));
  }
  if (rc != SQLITE_DONE) return Error("reading the records");
  return records;
}

}  // namespace lact::server
