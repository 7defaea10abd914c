#include "server/job_messages.h"

#include <algorithm>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "proto/in_band.h"

namespace lact::server {

bool NeedsTransfer(const v1::JobSpec& spec, int rank) {
  return ShardHasBytesInBand(spec.has_context_ref(), spec.has_output_ref(), rank,
                             spec.query_tokens_size() > 0, spec.return_state());
}

std::vector<v1::ShardSpec> ShardSpecs(const AttemptFacts& f) {
  const v1::JobSpec& spec = *f.spec;
  std::vector<v1::ShardSpec> specs;
  for (int r = 0; r < f.plan->workers; ++r) {
    v1::ShardSpec s;
    s.set_job_id(f.job_id);
    s.set_model(spec.model());
    *s.mutable_options() = spec.options();
    s.set_rank(r);
    s.set_world_size(f.plan->workers);
    s.set_begin(f.plan->shards[r].first);
    s.set_tokens(f.plan->shards[r].second);
    s.set_total_tokens(spec.context_tokens());
    // Per attempt: a dead attempt's shards, still waiting in the store,
    // never meet (or set keys for) the next attempt's.
    s.set_rendezvous_prefix(absl::StrCat(f.job_id, "/", f.attempt, "/"));
    s.set_attempt(f.attempt);
    s.set_collective_timeout_ms(f.collective_timeout_ms);
    s.set_dtype(spec.dtype());
    s.set_token_width(spec.token_width());
    s.set_ticket(f.ticket);
    s.set_fetch_ticket(f.fetch_ticket);
    s.set_tenant(spec.tenant());
    s.set_transfer(NeedsTransfer(spec, r));
    if (spec.has_context_ref()) {
      s.mutable_context_ref()->set_path(f.context_from_spool ? f.spool_path
                                                             : f.files->context.relative);
      s.mutable_context_ref()->set_tensor(spec.context_ref().tensor());
      s.set_context_from_spool(f.context_from_spool);
    } else {
      s.set_spool_path(f.spool_path);
    }
    if (spec.has_output_ref()) s.mutable_output_ref()->set_path(f.files->output.relative);
    if (r == 0) {
      *s.mutable_query_tokens() = spec.query_tokens();
      s.set_return_state(spec.return_state());
    }
    s.set_retain_seconds(f.retain.count());
    s.set_upload_idle_timeout_ms(static_cast<int32_t>(f.upload_idle_timeout.count()));
    specs.push_back(std::move(s));
  }
  return specs;
}

v1::SubmitResponse Accepted(const AttemptFacts& f, const std::vector<std::string>& workers) {
  const v1::JobSpec& spec = *f.spec;
  v1::SubmitResponse r;
  v1::JobAccepted* a = r.mutable_accepted();
  a->set_job_id(f.job_id);
  a->set_output_width(f.plan->config.output_width());
  a->set_ticket(f.ticket);
  a->set_fetch_ticket(f.fetch_ticket);
  a->set_context_tokens(spec.context_tokens());
  a->set_token_width(spec.token_width());
  a->set_dtype(spec.dtype());
  *a->mutable_query_tokens() = spec.query_tokens();
  a->set_output_in_band(!spec.has_output_ref());
  a->set_context_spooled(f.context_from_spool);
  for (size_t rank = 0; rank < workers.size(); ++rank) {
    v1::ShardRange* range = a->add_shards();
    range->set_worker(workers[rank]);
    range->set_begin(f.plan->shards[rank].first);
    range->set_tokens(f.plan->shards[rank].second);
    range->set_transfer(NeedsTransfer(spec, static_cast<int>(rank)));
  }
  return r;
}

void AddShardStats(const std::vector<v1::ShardDone>& dones, const JobPlan& plan,
                   v1::JobStats* stats) {
  double allreduce = 0, waited = 0, upload = 0, download = 0, output_window = 0, in_bytes = 0,
         out_bytes = 0;
  bool delivered = true;
  stats->clear_worker_idle_seconds();  // the last attempt's
  for (const v1::ShardDone& d : dones) {
    stats->add_worker_idle_seconds(d.idle_before_seconds());
    stats->set_compute_seconds(std::max(stats->compute_seconds(), d.compute_seconds()));
    stats->add_worker_peak_rss_bytes(d.peak_rss_bytes());
    allreduce += d.allreduce_seconds();
    waited += d.allreduce_waited_seconds();
    upload = std::max(upload, d.upload_seconds());
    download = std::max(download, d.download_seconds());
    output_window = std::max(output_window, d.output_seconds());
    in_bytes += static_cast<double>(d.context_bytes());
    out_bytes += static_cast<double>(d.output_bytes());
    delivered = delivered && d.results_delivered();
  }
  stats->set_layers(plan.config.n_layers);
  stats->set_upload_seconds(upload);
  stats->set_upload_mb_per_second(in_bytes / 1e6 / std::max(1e-9, upload));
  stats->set_download_seconds(download);
  stats->set_output_seconds(output_window);
  stats->set_download_mb_per_second(out_bytes / 1e6 /
                                    std::max(1e-9, output_window > 0 ? output_window : download));
  stats->set_allreduce_seconds(allreduce);
  stats->set_allreduce_hidden_fraction(
      allreduce > 0 ? std::clamp(1.0 - waited / allreduce, 0.0, 1.0) : 0.0);
  stats->set_coordinator_payload_bytes(0);
  stats->set_results_delivered(delivered);
}

std::string NewTicket() {
  std::random_device random;
  std::string ticket;
  for (int i = 0; i < 4; ++i) absl::StrAppendFormat(&ticket, "%08x", random());
  return ticket;
}

v1::WorkerQueryHeader QueryHeader(const QueryFacts& f) {
  v1::WorkerQueryHeader h;
  h.set_job_id(f.spec->job_id());
  *h.mutable_query_tokens() = f.spec->query_tokens();
  h.set_dtype(f.spec->dtype());
  h.set_token_width(f.spec->token_width());
  h.set_ticket(f.ticket);
  h.set_upload_idle_timeout_ms(static_cast<int32_t>(f.upload_idle_timeout.count()));
  return h;
}

v1::JobAccepted QueryAccepted(const QueryFacts& f) {
  v1::JobAccepted a;
  a.set_job_id(f.spec->job_id());
  v1::ShardRange* shard = a.add_shards();
  shard->set_worker(f.worker);
  shard->set_transfer(true);
  a.set_output_width(f.output_width);
  a.set_ticket(f.ticket);
  a.set_token_width(f.spec->token_width());
  a.set_dtype(f.spec->dtype());
  *a.mutable_query_tokens() = f.spec->query_tokens();
  return a;
}

v1::JobStats QueryStats(const v1::ShardDone& done, double seconds) {
  v1::JobStats stats;
  stats.set_seconds(seconds);
  stats.set_upload_seconds(done.upload_seconds());
  stats.set_upload_mb_per_second(static_cast<double>(done.context_bytes()) / 1e6 /
                                 std::max(1e-9, done.upload_seconds()));
  stats.set_compute_seconds(done.compute_seconds());
  stats.set_download_seconds(done.download_seconds());
  stats.set_download_mb_per_second(static_cast<double>(done.output_bytes()) / 1e6 /
                                   std::max(1e-9, done.download_seconds()));
  stats.add_worker_peak_rss_bytes(done.peak_rss_bytes());
  stats.set_coordinator_payload_bytes(0);
  stats.set_results_delivered(done.results_delivered());
  return stats;
}

}  // namespace lact::server
