// Device plumbing for the "tpu" (PrivateUse1) device: allocator, device guard,
// generator, PrivateUse1 hooks, and the torchtpu._C Python module.
#include <ATen/core/GeneratorForPrivateuseone.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/GeneratorImpl.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/CallOnce.h>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>

#include "common.h"

namespace torchtpu {

// ---------------------------------------------------------------- errors ----

std::string shape_str(c10::IntArrayRef sizes) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < sizes.size(); ++i) os << (i ? ", " : "") << sizes[i];
  os << "]";
  return os.str();
}

[[noreturn]] void throw_status(tpu_status_t* status, const std::string& what) {
  const tpu_status_code_t code = tpu_status_code(status);
  const char* m = tpu_status_message(status);
  const std::string msg = m ? m : "";
  tpu_status_free(status);
  switch (code) {
    case TPU_UNIMPLEMENTED:
      TORCH_CHECK_NOT_IMPLEMENTED(false, what, ": ", msg);
      break;
    case TPU_OUT_OF_RANGE:
      TORCH_CHECK_INDEX(false, what, ": ", msg);
      break;
    case TPU_RESOURCE_EXHAUSTED:
      TORCH_CHECK_WITH(OutOfMemoryError, false, what, ": out of tpu memory: ", msg);
      break;
    default:
      break;
  }
  TORCH_CHECK(false, what, ": ", msg, " (", tpu_status_code_name(code), ")");
  __builtin_unreachable();
}

// ------------------------------------------------------- current device ----

namespace {
thread_local c10::DeviceIndex tls_device = 0;
}

int device_count() {
  return tpu_runtime_initialized() ? tpu_runtime_device_count() : 0;
}

c10::DeviceIndex current_device() { return tls_device; }

void set_current_device(c10::DeviceIndex index) {
  const int n = device_count();
  TORCH_CHECK(index >= 0 && (n == 0 || index < n), "tpu: invalid device index ", int(index),
              " (", n, " tpu device(s) available)");
  tls_device = index;
}

// ------------------------------------------------------------ allocator ----

namespace {

void release_storage(void* ctx) { tpu_storage_release(static_cast<tpu_storage_t*>(ctx)); }

struct TpuAllocator final : public c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    TORCH_CHECK(tpu_runtime_initialized(),
                "tpu: the runtime is not initialised (import torchtpu first)");
    const c10::DeviceIndex dev = current_device();
    tpu_storage_t* s = nullptr;
    tpu_status_t* st = tpu_storage_create(dev, nbytes, &s);
    if (st) throw_status(st, "tpu: allocating " + std::to_string(nbytes) + " bytes");
    return make_data_ptr(s, dev);
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release_storage; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    TORCH_CHECK(false, "tpu: device storages cannot be copied through host pointers; "
                       "use tensor.copy_()");
  }
};

TpuAllocator g_allocator;

}  // namespace

c10::Allocator* tpu_allocator() { return &g_allocator; }

c10::DataPtr make_data_ptr(tpu_storage_t* storage, c10::DeviceIndex device) {
  // The data pointer is a unique fake address (the storage handle itself); it
  // is never dereferenced on the host.
  return c10::DataPtr(storage, storage, &release_storage, c10::Device(kTpu, device));
}

void resize_storage_bytes(const c10::Storage& storage, size_t nbytes) {
  TORCH_CHECK(storage.resizable(), "Trying to resize storage that is not resizable");
  tpu_storage_t* s = storage_of(storage);
  if (s == nullptr) {
    const c10::DeviceIndex saved = current_device();
    const c10::DeviceIndex dev = storage.device().has_index() ? storage.device().index() : saved;
    tls_device = dev;
    c10::DataPtr p;
    try {
      p = g_allocator.allocate(nbytes);
    } catch (...) {
      tls_device = saved;
      throw;
    }
    tls_device = saved;
    storage.set_data_ptr_noswap(std::move(p));
  } else if (nbytes != storage.nbytes()) {
    tpu_status_t* st = tpu_storage_resize(s, nbytes);
    if (st) throw_status(st, "tpu: resizing a storage to " + std::to_string(nbytes) + " bytes");
  }
  storage.set_nbytes(nbytes);
}

// ---------------------------------------------------------- device guard ----

namespace {

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
    if (d.has_index()) tls_device = d.index();
  }
  static c10::Stream default_stream(c10::Device d) {
    return c10::Stream(c10::Stream::DEFAULT,
                       c10::Device(kTpu, d.has_index() ? d.index() : current_device()));
  }
  c10::Stream getStream(c10::Device d) const override { return default_stream(d); }
  c10::Stream getDefaultStream(c10::Device d) const override { return default_stream(d); }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool) const override { return default_stream(d); }
  c10::Stream getNewStream(c10::Device d, int) const override { return default_stream(d); }
  c10::Stream exchangeStream(c10::Stream s) const override { return default_stream(s.device()); }
  c10::DeviceIndex deviceCount() const noexcept override {
    return static_cast<c10::DeviceIndex>(device_count());
  }
  // One in-order stream per device: events are trivial markers; waiting on
  // one waits for all work issued so far.
  void record(void** event, const c10::Stream&, const c10::DeviceIndex,
              const c10::EventFlag) const override {
    if (*event == nullptr) *event = reinterpret_cast<void*>(1);
  }
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override {
    sync();
    return true;
  }
  void destroyEvent(void*, const c10::DeviceIndex) const noexcept override {}
  void synchronizeEvent(void*) const override { sync(); }
  bool queryStream(const c10::Stream&) const override {
    sync();
    return true;
  }
  void synchronizeStream(const c10::Stream&) const override { sync(); }
  void synchronizeDevice(const c10::DeviceIndex) const override { sync(); }
  double elapsedTime(void*, void*, const c10::DeviceIndex) const override {
    TORCH_CHECK(false, "tpu: event timing is not supported");
  }

  static void sync() {
    if (!tpu_runtime_initialized()) return;
    check_status(tpu_runtime_synchronize(), "tpu: synchronize");
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, TpuGuardImpl);

// ------------------------------------------------------------- generator ----

// The RNG state (seed, offset) lives in the C runtime; it is process-wide, so
// every tpu generator object views the same state.
struct TpuGeneratorImpl : public c10::GeneratorImpl {
  explicit TpuGeneratorImpl(c10::DeviceIndex index = -1)
      : c10::GeneratorImpl(c10::Device(kTpu, index), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)) {}
  ~TpuGeneratorImpl() override = default;

  static c10::DeviceType device_type() { return kTpu; }

  void set_current_seed(uint64_t seed) override { tpu_rng_set_seed(seed); }
  void set_offset(uint64_t offset) override {
    uint64_t seed = 0, old = 0;
    tpu_rng_get_state(&seed, &old);
    tpu_rng_set_state(seed, offset);
  }
  uint64_t get_offset() const override {
    uint64_t seed = 0, off = 0;
    tpu_rng_get_state(&seed, &off);
    return off;
  }
  uint64_t current_seed() const override { return tpu_rng_seed(); }
  uint64_t seed() override {
    const uint64_t s = c10::detail::getNonDeterministicRandom();
    tpu_rng_set_seed(s);
    return s;
  }
  void set_state(const c10::TensorImpl& new_state) override {
    TORCH_CHECK(new_state.dtype() == caffe2::TypeMeta::Make<uint8_t>() &&
                    new_state.device().is_cpu() && new_state.numel() == 16,
                "tpu: RNG state must be a cpu uint8 tensor of 16 bytes (seed, offset)");
    TORCH_CHECK(new_state.is_contiguous(), "tpu: RNG state must be contiguous");
    uint64_t v[2];
    std::memcpy(v, new_state.data(), sizeof(v));
    tpu_rng_set_state(v[0], v[1]);
  }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    at::Tensor t = at::empty({16}, at::TensorOptions().dtype(at::kByte).device(at::kCPU));
    uint64_t v[2];
    tpu_rng_get_state(&v[0], &v[1]);
    std::memcpy(t.data_ptr(), v, sizeof(v));
    return t.getIntrusivePtr();
  }

 private:
  TpuGeneratorImpl* clone_impl() const override { return new TpuGeneratorImpl(device().index()); }
};

at::Generator make_generator(c10::DeviceIndex index) {
  if (index < 0) index = current_device();
  return at::make_generator<TpuGeneratorImpl>(index);
}

const at::Generator& default_generator(c10::DeviceIndex index) {
  static std::mutex mu;
  static std::map<c10::DeviceIndex, std::unique_ptr<at::Generator>> gens;
  if (index < 0) index = current_device();
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = gens[index];
  if (!slot) slot = std::make_unique<at::Generator>(make_generator(index));
  return *slot;
}

// ----------------------------------------------------------------- hooks ----

struct TpuHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return device_count() > 0; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  void init() const override {}
  c10::DeviceIndex deviceCount() const override {
    return static_cast<c10::DeviceIndex>(device_count());
  }
  void setCurrentDevice(c10::DeviceIndex d) const override { set_current_device(d); }
  c10::DeviceIndex getCurrentDevice() const override { return current_device(); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex d) const override {
    const c10::DeviceIndex old = current_device();
    if (d >= 0 && d != old) set_current_device(d);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex d) const override {
    return exchangeDevice(d);
  }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex index) const override {
    return default_generator(index);
  }
  at::Generator getNewGenerator(c10::DeviceIndex index) const override {
    return make_generator(index);
  }
  // Data pointers are opaque handles (possibly offset into a storage): never
  // dereference them; report the current device.
  at::Device getDeviceFromPtr(void*) const override { return c10::Device(kTpu, current_device()); }
  bool isPinnedPtr(const void*) const override { return false; }
  c10::Allocator* getPinnedMemoryAllocator() const override {
    TORCH_CHECK(false, "tpu: pinned host memory is not supported");
  }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    resize_storage_bytes(storage, newsize);
  }
};

struct Registrar {
  Registrar() {
    c10::SetAllocator(kTpu, &g_allocator);
    static TpuHooks hooks;
    at::RegisterPrivateUse1HooksInterface(&hooks);
  }
};
Registrar g_registrar;

}  // namespace
}  // namespace torchtpu

// --------------------------------------------------------- python module ----

namespace py = pybind11;
using namespace torchtpu;

namespace {
void check(tpu_status_t* s, const char* what) {
  if (s) throw_status(s, what);
}
}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "torchtpu C++ binding over the tpu C runtime";
  m.def(
      "init",
      [](const std::string& plugin_path, int cpu_devices) {
        py::gil_scoped_release nogil;
        check(tpu_runtime_init(plugin_path.c_str(), cpu_devices), "tpu: runtime init");
      },
      py::arg("plugin_path"), py::arg("cpu_devices") = 1);
  m.def("is_initialized", []() { return tpu_runtime_initialized(); });
  m.def("device_count", []() { return device_count(); });
  m.def("platform_name", []() {
    const char* s = tpu_runtime_platform_name();
    return std::string(s ? s : "");
  });
  m.def("platform_version", []() {
    const char* s = tpu_runtime_platform_version();
    return std::string(s ? s : "");
  });
  m.def("device_kind", [](int i) {
    TORCH_CHECK(i >= 0 && i < device_count(), "tpu: invalid device index ", i);
    const char* s = tpu_runtime_device_kind(i);
    return std::string(s ? s : "");
  });
  m.def("api_version", []() {
    int major = 0, minor = 0;
    tpu_runtime_api_version(&major, &minor);
    return py::make_tuple(major, minor);
  });
  m.def("set_eager_mode", [](int mode) {
    TORCH_CHECK(mode == TPU_EAGER_DEBUG || mode == TPU_EAGER_STRICT, "tpu: invalid eager mode ", mode);
    tpu_runtime_set_eager_mode(static_cast<tpu_eager_mode_t>(mode));
  });
  m.def("eager_mode", []() { return static_cast<int>(tpu_runtime_eager_mode()); });
  m.def("synchronize", []() {
    if (!tpu_runtime_initialized()) return;
    py::gil_scoped_release nogil;
    check(tpu_runtime_synchronize(), "tpu: synchronize");
  });
  m.def("metrics", []() {
    py::dict d;
    for (int i = 0; i < TPU_METRIC_COUNT; ++i) {
      const char* name = tpu_metric_name(static_cast<tpu_metric_t>(i));
      d[py::str(name ? name : ("metric_" + std::to_string(i)).c_str())] =
          py::int_(tpu_metric_get(static_cast<tpu_metric_t>(i)));
    }
    return d;
  });
  m.def("reset_metrics", []() { tpu_metrics_reset(); });
  m.def("manual_seed", [](uint64_t seed) { tpu_rng_set_seed(seed); });
  m.def("initial_seed", []() { return tpu_rng_seed(); });
  m.def("get_rng_state", []() {
    uint64_t seed = 0, offset = 0;
    tpu_rng_get_state(&seed, &offset);
    return py::make_tuple(seed, offset);
  });
  m.def("set_rng_state", [](uint64_t seed, uint64_t offset) { tpu_rng_set_state(seed, offset); });
  m.def("current_device", []() { return static_cast<int>(current_device()); });
  m.def("set_device", [](int i) { set_current_device(static_cast<c10::DeviceIndex>(i)); });
}
