/* A job's data plane behind a C interface: the client's transfers
 * (client/job_transfers.h) for callers in other languages that hold a
 * job's tokens in memory. The Python client loads it with ctypes
 * (client/python/lact/native.py): a shard's context rows then go from the
 * caller's array to the socket with no copy of their own, and its output
 * rows come back straight into the caller's array.
 *
 * One LactTransfer moves the bytes of one JobAccepted (one run of a job):
 * lact_transfer_start starts one stream per shard, each on a thread of its
 * own, and returns at once; lact_transfer_join waits for them and returns
 * a gRPC status code (0: every shard's results arrived whole, checked
 * against the workers' CRC-32C) with its message. Inputs that do not fit
 * the JobAccepted are INVALID_ARGUMENT (3) at join, naming what is wrong;
 * no memory or threads for the streams, RESOURCE_EXHAUSTED (8).
 *
 * Threads: lact_transfer_wait_sent and lact_transfer_cancel may be
 * called from any thread at any time before lact_transfer_free; join and
 * free from the owner, once each. The results (query outputs, state) may be
 * read after a join that returned 0 until free. The library's threads never
 * call back into the caller. */
#ifndef LACT_CLIENT_C_LACT_TRANSFER_H_
#define LACT_CLIENT_C_LACT_TRANSFER_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Changes whenever a declaration below changes; callers check it first. */
#define LACT_TRANSFER_ABI_VERSION 1
int lact_transfer_abi_version(void);

/* Wire dtypes, as common.proto's DType numbers them. */
enum { LACT_DTYPE_F32 = 1, LACT_DTYPE_BF16 = 2, LACT_DTYPE_F16 = 3 };

typedef struct LactTransferInput {
  const void* accepted; /* a serialized lact.v1.JobAccepted */
  size_t accepted_size;
  const char* tls_roots; /* PEM of the CA that signs the workers; NULL or "": plaintext */
  /* The context: [context_tokens, width] little-endian elements of the
   * job's dtype (`dtype`), contiguous; NULL sends no context rows (a job
   * running again from its spool). */
  const void* context;
  int64_t context_tokens;
  int64_t width;
  int dtype;
  /* Query sets, float32 [query_tokens[k], width] each; sent on rank 0 in
   * the job's dtype. */
  int query_sets;
  const float* const* queries;
  const int64_t* query_tokens;
  /* Where the context's outputs go: [accepted.context_tokens,
   * accepted.output_width] float32; NULL when they are not in band. */
  float* output;
  double timeout_seconds; /* for every stream, from now */
} LactTransferInput;

typedef struct LactTransfer LactTransfer;

/* Starts the transfers. Every buffer `input` points to must stay valid
 * until lact_transfer_free; `input` itself need not. */
LactTransfer* lact_transfer_start(const LactTransferInput* input);

/* Context tokens handed to gRPC so far, over every stream, once they are
 * more than `seen`, the transfers were joined, or `timeout_seconds` passed
 * (0: at once), whichever comes first. */
int64_t lact_transfer_wait_sent(LactTransfer* transfer, int64_t seen, double timeout_seconds);

/* Ends every stream; join then returns CANCELLED or the first failure. */
void lact_transfer_cancel(LactTransfer* transfer);

/* Waits for every stream. Returns the gRPC status code of the first failed
 * shard (rank order), 0 if none; writes its message, NUL-terminated and cut
 * to `capacity` bytes, into `message` (may be NULL). */
int lact_transfer_join(LactTransfer* transfer, char* message, size_t capacity);

/* After a join that returned 0. Query set k's outputs: `*elements` float32
 * values, [query_tokens[k], accepted.output_width]; NULL for a k out of range. */
const float* lact_transfer_query_output(const LactTransfer* transfer, int k, int64_t* elements);

/* The fused state's tensors: how many, and tensor i's name, shape (`*rank`
 * dimensions) and `*elements` float32 values; NULL for an i out of range. */
int lact_transfer_state_count(const LactTransfer* transfer);
const float* lact_transfer_state(const LactTransfer* transfer, int i, const char** name,
                                 const int64_t** shape, int* rank, int64_t* elements);

/* Cancels what still runs, waits for it, and frees everything. */
void lact_transfer_free(LactTransfer* transfer);

#ifdef __cplusplus
}
#endif

#endif /* LACT_CLIENT_C_LACT_TRANSFER_H_ */
