// Which shards of a job move bytes in band (ShardDataService.Transfer): the one
// rule the coordinator states in JobAccepted/ShardSpec and the worker checks.
#ifndef LACT_PROTO_IN_BAND_H_
#define LACT_PROTO_IN_BAND_H_

namespace lact {

// A shard has a Transfer stream when its context or output goes in band,
// or, on rank 0, when the job has query sets or returns its state.
inline bool ShardHasBytesInBand(bool context_by_ref, bool output_by_ref, int rank, bool has_queries,
                                bool return_state) {
  return !context_by_ref || !output_by_ref || (rank == 0 && (has_queries || return_state));
}

// Whether a shard's client sends it tokens: context rows (unless the job
// reads them by reference) or, on rank 0, query sets. A shard without them
// only sends results, and does not wait for the client to start.
inline bool ShardTakesTokensInBand(bool context_by_ref, int rank, bool has_queries) {
  return !context_by_ref || (rank == 0 && has_queries);
}

}  // namespace lact

#endif  // LACT_PROTO_IN_BAND_H_
