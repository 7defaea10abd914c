// The standard gRPC health (grpc.health.v1.Health) and reflection
// (grpc.reflection.v1alpha.ServerReflection) services on lact's servers,
// as gRPC's library provides them: Kubernetes probes and tools such as
// grpcurl need nothing of lact's own. Neither asks for a token or the
// cluster secret: health tells only whether a service is serving, and
// reflection only the protos, which are public.
//
// Contract: EnableHealthAndReflection() runs before the process builds its
// first grpc::ServerBuilder. Every server built after it answers Check and
// Watch for "" (the whole server) and for each name SetServing gives it;
// a name never given is NOT_FOUND. Thread-safe after that.
#ifndef LACT_PROTO_HEALTH_H_
#define LACT_PROTO_HEALTH_H_

#include <grpcpp/grpcpp.h>

#include <string>
#include <vector>

namespace lact {

void EnableHealthAndReflection();

// Marks `services` (full names, e.g. "lact.v1.CoordinatorService") and "" SERVING
// or NOT_SERVING on `server` (a draining process says NOT_SERVING).
void SetServing(grpc::Server& server, const std::vector<std::string>& services, bool serving);

}  // namespace lact

#endif  // LACT_PROTO_HEALTH_H_
