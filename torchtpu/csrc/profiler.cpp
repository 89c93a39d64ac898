// The runtime's trace ranges (torchtpu/trace.h) as PyTorch profiler events, so
// torch.profiler shows compiles, compile-cache look-ups and transfers next to
// the aten ops (which the dispatcher records by itself).
#include <ATen/record_function.h>

#include <string>
#include <vector>

#include "common.h"
#include "torchtpu/trace.h"

namespace torchtpu {
namespace {

struct Range {
  explicit Range(at::StepCallbacks&& step) : rf(std::move(step)) {}
  at::RecordFunction rf;
  std::vector<c10::IValue> inputs;  // outlives the callbacks that read it
};

void* range_begin(void*, tpu_trace_kind_t kind, const char* detail) {
  // The dispatcher's own check, a thread-local cache: at::hasCallbacks() took a
  // global mutex on every op's cache look-up range.
  std::optional<at::StepCallbacks> step = at::getStepCallbacksUnlessEmpty(at::RecordScope::USER_SCOPE);
  if (!step) return nullptr;
  auto* r = new Range(std::move(*step));
  const std::string_view name = tpu_trace_kind_name(kind);
  if (r->rf.needsInputs() && detail && *detail) {
    r->inputs.emplace_back(std::string(detail));
    r->rf.before(name, &r->inputs);
  } else {
    r->rf.before(name);
  }
  return r;
}

void range_end(void*, void* range) { delete static_cast<Range*>(range); }

}  // namespace

void install_trace_hooks() {
  tpu_trace_hooks_t hooks = {};
  hooks.struct_size = sizeof hooks;
  hooks.begin = range_begin;
  hooks.end = range_end;
  check_status(tpu_trace_set_hooks(&hooks), "tpu: installing profiler hooks");
}

}  // namespace torchtpu
