#include "server/job_recovery.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "proto/job_options.h"
#include "server/job_run.h"
#include "server/worker_streams.h"

namespace lact::server {
namespace {

// How long a job taken back waits for a worker that holds its model to
// register (its plan needs the model's config).
constexpr auto kModelWait = std::chrono::seconds(60);

// The call of a job taken back: its client's Submit call ended with the
// last coordinator, and the client, if it is still there, follows the job
// with WatchJob. The job's deadline is the call's, as recorded.
class TakenBackCall final : public JobCall {
 public:
  explicit TakenBackCall(std::chrono::system_clock::time_point deadline) : deadline_(deadline) {}
  bool Write(const v1::SubmitResponse&) override { return false; }
  bool ended() const override { return false; }
  bool EndsWithin(absl::Duration) const override { return false; }
  std::chrono::system_clock::time_point deadline() const override { return deadline_; }

 private:
  const std::chrono::system_clock::time_point deadline_;
};

// The job's plan as admitted: its model's config, once a worker that holds
// the model has registered, and its shards.
absl::StatusOr<JobPlan> RestorePlan(const CoordinatorContext& c, const JobRecord& record) {
  const v1::JobSpec& spec = record.spec();
  const auto until = std::chrono::steady_clock::now() + kModelWait;
  absl::StatusOr<ModelConfig> model = c.registry->FindModel(spec.model());
  while (!model.ok() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    model = c.registry->FindModel(spec.model());
  }
  LACT_RETURN_IF_ERROR(model.status());
  JobPlan plan;
  LACT_ASSIGN_OR_RETURN(plan.config, ApplyJobOptions(*model, FromProto(spec.options())));
  LACT_ASSIGN_OR_RETURN(plan.dtype, FromProto(spec.dtype()));
  int64_t begin = 0;
  for (int64_t tokens : record.shard_tokens()) {
    plan.shards.emplace_back(begin, tokens);
    begin += tokens;
  }
  plan.workers = static_cast<int>(plan.shards.size());
  return plan;
}

JobFiles RestoreFiles(const CoordinatorContext& c, const JobRecord& r) {
  JobFiles files;
  if (!r.context_path().empty()) files.context = DataPath{c.options.data_root, r.context_path()};
  files.context_id =
      FileId{static_cast<dev_t>(r.context_device()), static_cast<ino_t>(r.context_inode())};
  if (!r.output_path().empty()) files.output = DataPath{c.options.data_root, r.output_path()};
  return files;
}

void TakeBack(const CoordinatorContext& c, RestoredJob job) {
  const std::string id = job.info.job_id();
  auto machine = std::make_shared<JobMachine>(id);
  SetJobCanceller(c, id, machine);
  Log(LogLevel::kInfo, "job_taken_back",
      {{"job", id},
       {"status", v1::JobInfo::Status_Name(job.info.status())},
       {"attempt", job.record.attempt()},
       {"workers",
        std::vector<std::string>(job.record.workers().begin(), job.record.workers().end())}});
  absl::StatusOr<JobPlan> plan = RestorePlan(c, job.record);
  if (!plan.ok()) {
    const std::string error = absl::StrCat(
        "job ", id,
        " could not be taken back after the coordinator restarted: ", plan.status().message());
    c.jobs->Finish(id, v1::JobInfo::FAILED, error, job.info.stats());
    Log(LogLevel::kWarn, "job_ended", {{"job", id}, {"status", "FAILED"}, {"error", error}});
    return;
  }
  GrpcJobTransport transport(c.cluster);
  TakenBackCall call(std::chrono::system_clock::time_point(
      std::chrono::milliseconds(job.record.deadline_unix_ms())));
  JobRun run(c, &transport, &call,
             AdmittedJob{id, job.record.spec(), RestoreFiles(c, job.record), *std::move(plan)},
             machine);
  run.TakeBack(job.record);
  run.Run().IgnoreError();  // its end is in the job's record and the log
}

}  // namespace

void PrepareTakeBack(const std::vector<RestoredJob>& jobs, KvStore* kv) {
  for (const RestoredJob& job : jobs) {
    if (job.record.attempt() >= 0) kv->BeginAttempt(job.info.job_id(), job.record.attempt());
  }
}

void TakeBackJobs(const CoordinatorContext& coordinator, std::vector<RestoredJob> jobs) {
  for (RestoredJob& job : jobs) {
    std::thread([coordinator, job = std::move(job)]() mutable {
      TakeBack(coordinator, std::move(job));
    }).detach();
  }
}

}  // namespace lact::server
