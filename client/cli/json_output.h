// `--json`: each command's summary as one JSON object on stdout, for scripts
// (the progress lines stay on stderr). Protobuf messages are printed in
// proto3's JSON mapping with the .proto field names and every field present,
// zeros included; int64 fields are strings there, as that mapping requires.
#ifndef LACT_CLIENT_CLI_JSON_OUTPUT_H_
#define LACT_CLIENT_CLI_JSON_OUTPUT_H_

#include "absl/status/statusor.h"
#include "google/protobuf/message.h"
#include "nlohmann/json.hpp"

namespace lact::cli {

absl::StatusOr<nlohmann::json> ProtoToJson(const google::protobuf::Message& message);

// One line: the object, then a newline; stdout flushed.
void PrintJson(const nlohmann::json& object);

}  // namespace lact::cli

#endif  // LACT_CLIENT_CLI_JSON_OUTPUT_H_
