#include "client/job_io.h"

#include "absl/strings/str_cat.h"

namespace lact {
int64_t ContextInput::tokens() const {
  if (kind_ == Kind::kSource) return source_.tokens;
  if (kind_ == Kind::kWire) return wire_.tokens;
  if (kind_ == Kind::kTensor && tensor_->rank() == 2) return tensor_->dim(0);
  return 0;
}

int64_t ContextInput::width() const {
  if (kind_ == Kind::kSource) return source_.width;
  if (kind_ == Kind::kWire) return wire_.width;
  if (kind_ == Kind::kTensor && tensor_->rank() == 2) return tensor_->dim(1);
  return 0;
}

absl::Status ContextInput::Check() const {
  switch (kind_) {
    case Kind::kFile:
      if (file_.path.empty()) return absl::InvalidArgumentError("the context file has no path");
      return absl::OkStatus();
    case Kind::kSource:
      if (!source_.read || source_.tokens < 1 || source_.width < 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("a context source must read [L >= 1, width >= 1] rows, not [",
                         source_.tokens, ", ", source_.width, "]"));
      }
      return absl::OkStatus();
    case Kind::kWire:
      if (wire_.data == nullptr || wire_.tokens < 1 || wire_.width < 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("wire rows must be [L >= 1, width >= 1] in memory, not [", wire_.tokens,
                         ", ", wire_.width, "]", wire_.data == nullptr ? " at null" : ""));
      }
      return absl::OkStatus();
    case Kind::kTensor:
      if (tensor_->rank() != 2 || tensor_->dim(0) < 1 || tensor_->dim(1) < 1) {
        return absl::InvalidArgumentError(absl::StrCat("context must be [L >= 1, width >= 1], not ",
                                                       ShapeString(tensor_->shape)));
      }
      return absl::OkStatus();
  }
  return absl::OkStatus();
}

absl::Status ContextInput::CheckDtype(WireType dtype) const {
  if (kind_ != Kind::kWire || wire_.dtype == dtype) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("the context's rows are ", WireTypeName(wire_.dtype), " but the job's dtype is ",
                   WireTypeName(dtype), "; wire rows go as they are"));
}

}  // namespace lact
