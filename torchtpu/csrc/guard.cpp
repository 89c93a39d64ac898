// The tpu device guard: current device, streams, events and capabilities for
// c10 (torch.Stream, torch.Event, torch.accelerator, torch.tpu). Streams and
// events are the C runtime's (torchtpu/stream.h); this only adapts them.
#include <c10/core/DeviceCapability.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "common.h"
#include "torchtpu/stream.h"

namespace torchtpu {
namespace {

c10::DeviceIndex index_of(c10::Device d) { return d.has_index() ? d.index() : current_device(); }

c10::Stream make_stream(c10::DeviceIndex index, int64_t id) {
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kTpu, index), static_cast<c10::StreamId>(id));
}

tpu_event_t* as_event(void* event) { return static_cast<tpu_event_t*>(event); }

struct TpuGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  static constexpr c10::DeviceType static_type = kTpu;

  c10::DeviceType type() const override { return kTpu; }
  c10::Device exchangeDevice(c10::Device d) const override {
    TORCH_CHECK(d.type() == kTpu, "tpu guard: expected a tpu device, got ", d);
    c10::Device old = getDevice();
    if (d.index() != old.index()) setDevice(d);
    return old;
  }
  c10::Device getDevice() const override { return c10::Device(kTpu, current_device()); }
  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.type() == kTpu, "tpu guard: expected a tpu device, got ", d);
    if (d.has_index()) set_current_device(d.index());
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.has_index()) set_current_device_unchecked(d.index());
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    return static_cast<c10::DeviceIndex>(device_count());
  }

  // ---- streams: ids minted by the runtime; "current" is per thread and device ----
  c10::Stream getStream(c10::Device d) const override {
    const c10::DeviceIndex i = index_of(d);
    return make_stream(i, tpu_stream_current(i));
  }
  c10::Stream getDefaultStream(c10::Device d) const override {
    return make_stream(index_of(d), TPU_STREAM_DEFAULT);
  }
  c10::Stream getNewStream(c10::Device d, int /*priority*/) const override {
    const c10::DeviceIndex i = index_of(d);
    int64_t id = 0;
    check_status(tpu_stream_create(i, &id), "tpu: creating a stream");
    return make_stream(i, id);
  }
  // Streams cost nothing to create, so "the pool" hands out new ones.
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool /*high_priority*/) const override {
    return getNewStream(d, 0);
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    const c10::DeviceIndex i = s.device_index();
    c10::Stream old = make_stream(i, tpu_stream_current(i));
    check_status(tpu_stream_set_current(i, s.id()), "tpu: setting the current stream");
    return old;
  }
  bool queryStream(const c10::Stream& s) const override {
    bool done = false;
    check_status(tpu_stream_query(s.device_index(), s.id(), &done), "tpu: querying a stream");
    return done;
  }
  void synchronizeStream(const c10::Stream& s) const override {
    check_status(tpu_stream_synchronize(s.device_index(), s.id()), "tpu: synchronizing a stream");
  }
  void synchronizeDevice(const c10::DeviceIndex) const override { sync(); }

  // ---- events: a c10 event's handle is a runtime event, made at first record ----
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex,
              const c10::EventFlag flag) const override {
    TORCH_CHECK(stream.device_type() == kTpu, "tpu: cannot record a tpu event on ", stream);
    if (*event == nullptr) {
      tpu_event_t* ev = nullptr;
      // torch.Event(enable_timing=True) asks for the backend default: timing.
      check_status(tpu_event_create(flag == c10::EventFlag::BACKEND_DEFAULT, &ev),
                   "tpu: creating an event");
      *event = ev;
    }
    check_status(tpu_event_record(as_event(*event), stream.device_index(), stream.id()),
                 "tpu: recording an event");
  }
  // PJRT cannot make one execution wait for another it does not read, so a
  // stream waits for an event on the host (stream.h).
  void block(void* event, const c10::Stream&) const override {
    if (event) check_status(tpu_event_synchronize(as_event(event)), "tpu: waiting for an event");
  }
  bool queryEvent(void* event) const override {
    bool done = true;
    if (event) check_status(tpu_event_query(as_event(event), &done), "tpu: querying an event");
    return done;
  }
  void synchronizeEvent(void* event) const override {
    if (event) check_status(tpu_event_synchronize(as_event(event)), "tpu: synchronizing an event");
  }
  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    tpu_event_destroy(as_event(event));
  }
  double elapsedTime(void* start, void* end, const c10::DeviceIndex) const override {
    TORCH_CHECK(start && end, "tpu: both events must be recorded before calculating elapsed time");
    double ms = 0;
    check_status(tpu_event_elapsed_ms(as_event(start), as_event(end), &ms), "tpu: Event.elapsed_time");
    return ms;
  }

  // The dtypes a tpu tensor can hold.
  c10::DeviceCapability getDeviceCapability(c10::Device) const override {
    c10::DeviceCapability cap;
    cap.capability_data.capability_bits = 0;
    tpu_dtype_t unused;
#define TPU_SUPPORTED(_1, n) \
  cap.capability_data.supported_scalar_types.has_##n = to_tpu_dtype(c10::ScalarType::n, &unused);
    AT_FORALL_SCALAR_TYPES_WITH_COMPLEX_AND_QINTS(TPU_SUPPORTED)
#undef TPU_SUPPORTED
    return cap;
  }

  static void sync() {
    if (!tpu_runtime_initialized()) return;
    check_status(tpu_runtime_synchronize(), "tpu: synchronize");
  }
};

}  // namespace

C10_REGISTER_GUARD_IMPL(PrivateUse1, TpuGuardImpl);

}  // namespace torchtpu
