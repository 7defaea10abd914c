#include "client/cli/json_output.h"

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"

namespace lact::cli {

absl::StatusOr<nlohmann::json> ProtoToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  std::string text;
  const auto status = google::protobuf::util::MessageToJsonString(message, &text, options);
  if (!status.ok()) {
    return absl::InternalError(
        absl::StrCat("printing ", message.GetTypeName(), " as JSON: ", status.ToString()));
  }
  return nlohmann::json::parse(text);
}

void PrintJson(const nlohmann::json& object) {
  std::printf("%s\n", object.dump().c_str());
  std::fflush(stdout);
}

}  // namespace lact::cli
