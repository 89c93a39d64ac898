// Device plumbing for the "tpu" (PrivateUse1) device: allocator, device guard,
// generator, PrivateUse1 hooks, and the torchtpu._C Python module.
#include <ATen/core/GeneratorForPrivateuseone.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/core/GeneratorImpl.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/CallOnce.h>

#include <torch/csrc/Generator.h>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string_view>

#include "common.h"
#include "torchtpu/memory.h"

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
    case TPU_LINALG_ERROR:
      TORCH_CHECK_LINALG(false, what, ": ", msg);
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
void set_current_device_unchecked(c10::DeviceIndex index) noexcept { tls_device = index; }

void set_current_device(c10::DeviceIndex index) {
  const int n = device_count();
  TORCH_CHECK(index >= 0 && (n == 0 || index < n), "tpu: invalid device index ", int(index),
              " (", n, " tpu device(s) available)");
  tls_device = index;
}

// ------------------------------------------------------------ allocator ----

void release_storage(void* ctx) { tpu_storage_release(static_cast<tpu_storage_t*>(ctx)); }

tpu_storage_t* foreign_storage(const c10::DataPtr& p) {
  if (p.get() == nullptr && p.get_context() == nullptr) return nullptr;  // no memory yet
  TORCH_CHECK(false, "tpu: this tensor's memory was not allocated by torchtpu (a DLPack import of a tpu "
                     "tensor, or a storage made from a pointer): its contents cannot be read on the tpu device; "
                     "copy the original tensor instead (tensor.clone() or .to(\"tpu\"))");
  return nullptr;
}

namespace {

// A DeviceAllocator, so torch.accelerator's memory functions (and torch.tpu's
// over them) read the runtime's per-device accounting (torchtpu/memory.h).
struct TpuAllocator final : public c10::DeviceAllocator {
  bool initialized() override { return tpu_runtime_initialized(); }
  void emptyCache(c10::MempoolId_t) override { tpu_memory_empty_cache(); }
  // Device buffers are immutable and reference-counted: a buffer another
  // stream still reads is never reused, so there is nothing to record.
  void recordStream(const c10::DataPtr&, c10::Stream) override {}
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override;
  void resetAccumulatedStats(c10::DeviceIndex device) override {
    check_status(tpu_memory_reset_accumulated(device), "tpu: resetting memory statistics");
  }
  void resetPeakStats(c10::DeviceIndex device) override {
    check_status(tpu_memory_reset_peak(device), "tpu: resetting peak memory statistics");
  }
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    int64_t free_bytes = 0, total = 0;
    check_status(tpu_memory_info(device, &free_bytes, &total), "tpu: reading device memory");
    return {static_cast<size_t>(free_bytes), static_cast<size_t>(total)};
  }

  c10::DataPtr allocate(size_t nbytes) override {
    TORCH_CHECK(tpu_runtime_initialized(),
                "tpu: the runtime is not initialised (import torchtpu first)");
    const c10::DeviceIndex dev = current_device();
    tpu_storage_t* s = nullptr;  // larger than the whole device: OutOfMemoryError here (storage.c)
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

static_assert(TPU_MEMORY_POOL_ALL == static_cast<int>(c10::CachingDeviceAllocator::StatType::AGGREGATE) &&
                  TPU_MEMORY_POOL_SMALL == static_cast<int>(c10::CachingDeviceAllocator::StatType::SMALL_POOL) &&
                  TPU_MEMORY_POOL_LARGE == static_cast<int>(c10::CachingDeviceAllocator::StatType::LARGE_POOL),
              "memory pools index PyTorch's StatArray");

c10::CachingDeviceAllocator::DeviceStats TpuAllocator::getDeviceStats(c10::DeviceIndex device) {
  tpu_memory_stats_t s;
  std::memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  check_status(tpu_memory_stats(device, &s), "tpu: reading memory statistics");
  c10::CachingDeviceAllocator::DeviceStats out;
  for (int p = 0; p < TPU_MEMORY_POOL_COUNT; ++p) {
    auto stat = [](const tpu_memory_stat_t& m) {
      c10::CachingDeviceAllocator::Stat st;
      st.current = m.current;
      st.peak = m.peak;
      st.allocated = m.allocated;
      st.freed = m.freed;
      return st;
    };
    // Each buffer is its own allocation and segment, fully used: no pool, no
    // split blocks, nothing reserved beyond what is allocated.
    out.allocation[p] = out.segment[p] = out.active[p] = stat(s.buffers[p]);
    out.allocated_bytes[p] = out.reserved_bytes[p] = out.active_bytes[p] = out.requested_bytes[p] =
        stat(s.bytes[p]);
  }
  return out;
}

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

// ------------------------------------------------------------- generator ----

namespace {

// The RNG state (seed, offset) lives in a C runtime generator. A device's
// default generator views the runtime's default for that device (borrowed);
// `torch.Generator(device="tpu")` and clones own a generator of their own.
tpu_generator_t* new_generator_state(uint64_t seed) {
  tpu_generator_t* g = nullptr;
  tpu_status_t* st = tpu_generator_create(seed, &g);
  if (st) throw_status(st, "tpu: creating a generator");
  return g;
}

struct TpuGeneratorImpl : public c10::GeneratorImpl {
  TpuGeneratorImpl(c10::DeviceIndex index, tpu_generator_t* gen, bool owned)
      : c10::GeneratorImpl(c10::Device(kTpu, index), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
        gen_(gen),
        owned_(owned) {}
  ~TpuGeneratorImpl() override {
    if (owned_) tpu_generator_destroy(gen_);
  }

  static c10::DeviceType device_type() { return kTpu; }
  tpu_generator_t* state() const { return gen_; }

  void set_current_seed(uint64_t seed) override { tpu_generator_set_seed(gen_, seed); }
  void set_offset(uint64_t offset) override {
    uint64_t seed = 0, old = 0;
    tpu_generator_get_state(gen_, &seed, &old);
    tpu_generator_set_state(gen_, seed, offset);
  }
  uint64_t get_offset() const override {
    uint64_t seed = 0, off = 0;
    tpu_generator_get_state(gen_, &seed, &off);
    return off;
  }
  uint64_t current_seed() const override { return tpu_generator_seed(gen_); }
  uint64_t seed() override {
    const uint64_t s = c10::detail::getNonDeterministicRandom();
    tpu_generator_set_seed(gen_, s);
    return s;
  }
  void set_state(const c10::TensorImpl& new_state) override {
    TORCH_CHECK(new_state.dtype() == caffe2::TypeMeta::Make<uint8_t>() &&
                    new_state.device().is_cpu() && new_state.numel() == 16,
                "tpu: RNG state must be a cpu uint8 tensor of 16 bytes (seed, offset)");
    TORCH_CHECK(new_state.is_contiguous(), "tpu: RNG state must be contiguous");
    uint64_t v[2];
    std::memcpy(v, new_state.data(), sizeof(v));
    tpu_generator_set_state(gen_, v[0], v[1]);
  }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    at::Tensor t = at::empty({16}, at::TensorOptions().dtype(at::kByte).device(at::kCPU));
    uint64_t v[2];
    tpu_generator_get_state(gen_, &v[0], &v[1]);
    std::memcpy(t.data_ptr(), v, sizeof(v));
    return t.getIntrusivePtr();
  }

 private:
  TpuGeneratorImpl* clone_impl() const override {
    uint64_t seed = 0, off = 0;
    tpu_generator_get_state(gen_, &seed, &off);
    tpu_generator_t* g = new_generator_state(seed);
    tpu_generator_set_state(g, seed, off);
    return new TpuGeneratorImpl(device().index(), g, /*owned=*/true);
  }
  tpu_generator_t* gen_;
  bool owned_;
};

// A new generator of its own, seeded like a fresh CUDA generator.
at::Generator make_generator(c10::DeviceIndex index) {
  if (index < 0) index = current_device();
  return at::make_generator<TpuGeneratorImpl>(index, new_generator_state(c10::default_rng_seed_val),
                                              /*owned=*/true);
}


const at::Generator& default_generator(c10::DeviceIndex index) {
  static std::mutex mu;
  static std::map<c10::DeviceIndex, std::unique_ptr<at::Generator>> gens;
  if (index < 0) index = current_device();
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = gens[index];
  if (!slot) {
    tpu_generator_t* g = tpu_generator_default(index);
    TORCH_CHECK(g != nullptr, "tpu: no generator for device ", int(index));
    slot = std::make_unique<at::Generator>(at::make_generator<TpuGeneratorImpl>(index, g, /*owned=*/false));
  }
  return *slot;
}

// ------------------------------------------------------- pinned memory ----

// PJRT copies host data during BufferFromHostBuffer from any host memory, so
// there is nothing to page-lock: "pinned" tpu host memory is ordinary aligned
// host memory that remembers it was asked for as pinned. That gives
// `t.pin_memory()`, `is_pinned()` and `DataLoader(pin_memory=True)` their
// PyTorch semantics (a pinned copy, reported as pinned) on every plugin.
class PinnedAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    void* p = nbytes ? c10::alloc_cpu(nbytes) : nullptr;
    if (p) {
      std::lock_guard<std::mutex> lock(mu_);
      live_[p] = nbytes;
    }
    return c10::DataPtr(p, p, &release, c10::Device(c10::DeviceType::CPU));
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
  // True for any address inside a live pinned allocation.
  bool owns(const void* p) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.upper_bound(const_cast<void*>(p));
    if (it == live_.begin()) return false;
    --it;
    const char* base = static_cast<const char*>(it->first);
    return static_cast<const char*>(p) < base + it->second;
  }

 private:
  static void release(void* p);
  mutable std::mutex mu_;
  std::map<void*, size_t> live_;
};

PinnedAllocator g_pinned;

void PinnedAllocator::release(void* p) {
  if (!p) return;
  {
    std::lock_guard<std::mutex> lock(g_pinned.mu_);
    g_pinned.live_.erase(p);
  }
  c10::free_cpu(p);
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
  bool isPinnedPtr(const void* p) const override { return g_pinned.owns(p); }
  c10::Allocator* getPinnedMemoryAllocator() const override { return &g_pinned; }
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

tpu_generator_t* generator_state(const at::Generator& gen) {
  TORCH_CHECK(gen.device().type() == kTpu, "tpu: expected a tpu generator, got one for ", gen.device());
  return static_cast<TpuGeneratorImpl*>(gen.unsafeGetGeneratorImpl())->state();
}

}  // namespace torchtpu

// --------------------------------------------------------- python module ----

namespace py = pybind11;
using namespace torchtpu;

namespace {
void check(tpu_status_t* s, const char* what) {
  if (s) throw_status(s, what);
}
}  // namespace

namespace torchtpu {
void register_graph(py::module& m);  // graph.cpp
void install_trace_hooks();          // profiler.cpp
void register_c10d(py::module& m);   // c10d.cpp
}

PYBIND11_MODULE(_C, m) {
  m.doc() = "torchtpu C++ binding over the tpu C runtime";
  register_graph(m);
  install_trace_hooks();
  register_c10d(m);
  m.def(
      "init",
      [](const std::string& plugin_path, int cpu_devices) {
        py::gil_scoped_release nogil;
        check(tpu_runtime_init(plugin_path.c_str(), cpu_devices), "tpu: runtime init");
      },
      py::arg("plugin_path"), py::arg("cpu_devices") = 1);
  m.def("version", []() { return std::string(TORCHTPU_VERSION); });
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
    TORCH_CHECK(mode == TPU_EAGER_DEBUG || mode == TPU_EAGER_STRICT || mode == TPU_EAGER_FUSED,
                "tpu: invalid eager mode ", mode);
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
  // torch.compile's graph walk (Python) decides when a graph runs as eager ops.
  m.def("note_graph_fallback", []() { tpu_metric_add(TPU_METRIC_GRAPH_FALLBACKS, 1); });
  // Both compile-cache tiers: the in-memory executables and the disk entries.
  m.def("cache_clear", []() {
    py::gil_scoped_release nogil;
    tpu_cache_clear();
    check(tpu_disk_cache_clear(), "tpu: cache_clear");
  });
  m.def("cache_dir", []() { return std::string(tpu_disk_cache_dir()); });
  // Opaque disk-tier entries for torch.compile's traced graphs (torchtpu/_trace_cache.py).
  m.def("blob_enabled", []() { return tpu_disk_blob_enabled(); });
  m.def("blob_load", [](const std::string& name) -> py::object {
    uint8_t* data = nullptr;
    size_t len = 0;
    tpu_status_t* status = nullptr;
    {
      py::gil_scoped_release nogil;
      status = tpu_disk_blob_load(name.data(), name.size(), &data, &len);
    }
    if (status) {
      tpu_status_free(status);  // a miss (corrupt entries are removed and counted by the runtime)
      return py::none();
    }
    py::bytes out(reinterpret_cast<const char*>(data), len);
    free(data);
    return out;
  });
  m.def("blob_store", [](const std::string& name, const py::bytes& data) {
    std::string_view view = data;
    py::gil_scoped_release nogil;
    tpu_disk_blob_store(name.data(), name.size(), view.data(), view.size());
  });
  m.def("default_generator", [](int index) {
    TORCH_CHECK(index >= 0 && index < device_count(), "tpu: invalid device index ", index);
    return py::reinterpret_steal<py::object>(
        THPGenerator_initDefaultGenerator(default_generator(static_cast<c10::DeviceIndex>(index))));
  });
  m.def("current_device", []() { return static_cast<int>(current_device()); });
  m.def("set_device", [](int i) { set_current_device(static_cast<c10::DeviceIndex>(i)); });
}
