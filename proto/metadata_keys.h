// gRPC metadata keys the lact processes agree on.
#ifndef LACT_PROTO_METADATA_KEYS_H_
#define LACT_PROTO_METADATA_KEYS_H_

namespace lact {

// Trailing metadata a worker puts on every RunShard status its handler
// returns, so the coordinator can tell a worker's own failure from a broken
// transport (the worker is gone) by type, not by reading the message.
inline constexpr char kWorkerStatusKey[] = "lact-worker-status";
// On every Submit call's trailing metadata: the call's status is the
// coordinator's. A status without it means the coordinator went away (a
// restart): the job runs on, and its client follows it with WatchJob.
inline constexpr char kCoordinatorStatusKey[] = "lact-coordinator-status";
// On every Submit and ListModels answer's initial metadata of a
// coordinator that keeps its jobs across restarts (--state-dir): a client
// makes a Submit call lost to such a coordinator going away again.
inline constexpr char kKeepsJobsKey[] = "lact-coordinator-keeps-jobs";

}  // namespace lact

#endif  // LACT_PROTO_METADATA_KEYS_H_
