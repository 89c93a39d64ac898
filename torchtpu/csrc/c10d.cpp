// The "tpu" c10d backend, host path: collectives on tpu tensors staged through
// host memory over a CPU backend (gloo), for PJRT plugins that cannot run
// collectives across processes (the CPU plugin). Every collective copies its
// tpu inputs to host tensors, runs the host backend's collective, waits, and
// writes the results back into the tpu outputs; the Work it returns is
// complete, and its future holds the tpu outputs; sends and receives return
// a Work that finishes on wait() (docs/distributed.md).
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/utils/pybind.h>
#include <c10/util/strides.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "common.h"

namespace torchtpu {
namespace {

using c10d::OpType;
using Tensors = std::vector<at::Tensor>;
using TensorLists = std::vector<std::vector<at::Tensor>>;
using WorkPtr = c10::intrusive_ptr<c10d::Work>;

c10::intrusive_ptr<c10::ivalue::Future> completed_future(const Tensors& outputs) {
  std::vector<c10::Device> devices;
  for (const at::Tensor& t : outputs) {
    if (std::find(devices.begin(), devices.end(), t.device()) == devices.end()) devices.push_back(t.device());
  }
  auto f = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()), devices);
  f->markCompleted(c10::IValue(outputs));
  return f;
}

// A finished collective: waits return at once; the future holds the outputs.
class DoneWork final : public c10d::Work {
 public:
  DoneWork(int rank, OpType op, Tensors outputs)
      : c10d::Work(rank, op), outputs_(std::move(outputs)), future_(completed_future(outputs_)) {}
  bool isCompleted() override { return true; }
  bool isSuccess() const override { return true; }
  bool wait(std::chrono::milliseconds) override { return true; }
  void synchronize() override {}
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  Tensors outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// Host staging memory: blocks of the runtime's host pool (tpu_host_block_acquire),
// reused across collectives, so a call pays no page faults of fresh memory (25 ms
// for 64 MiB, several times the copy). A staged output returns to its tpu tensor
// as the block itself where the plugin reads host memory (the CPU plugin):
// tpu_tensor_upload_block lends the block to the device buffer, so writing a
// result back costs no copy.
struct HostBlock {
  void* ptr;
  std::atomic<bool> lent{false};  // the device buffer owns the block now
};

void drop_host_block(void* ctx) {
  auto* b = static_cast<HostBlock*>(ctx);
  if (!b->lent.load()) tpu_host_block_release(b->ptr);
  delete b;
}

// A contiguous host tensor with t's sizes and dtype, uninitialised.
at::Tensor host_like(const at::Tensor& t) {
  const size_t nbytes = static_cast<size_t>(t.numel()) * t.element_size();
  void* p = nullptr;
  check_status(tpu_host_block_acquire(nbytes, &p), "tpu c10d backend: host staging");
  c10::DataPtr data(p, new HostBlock{p}, drop_host_block, c10::Device(c10::kCPU));
  c10::Storage s(c10::Storage::use_byte_size_t(), nbytes, std::move(data), nullptr, false);
  return at::empty({0}, t.options().device(at::kCPU)).set_(s, 0, t.sizes(), c10::contiguous_strides(t.sizes()));
}

// dst ← host, a tensor of host_like(dst) that nothing writes any more.
void unstage_one(at::Tensor& dst, const at::Tensor& host) {
  auto* b = host.storage().data_ptr().cast_context<HostBlock>(drop_host_block);
  tpu_dtype_t hd;
  if (b && dst.is_contiguous() && !dst.is_conj() && !dst.is_neg() && host.scalar_type() == dst.scalar_type() &&
      to_tpu_dtype(host.scalar_type(), &hd) && !b->lent.exchange(true)) {
    const tpu_tensor_t d = describe(dst);
    check_status(tpu_tensor_upload_block(&d, b->ptr, hd), "tpu c10d backend: writing the result back");
    return;
  }
  dst.copy_(host);
}

// A point-to-point operation still running on the host backend: isend/irecv
// must not block (batch_isend_irecv posts both sides before waiting). wait()
// waits for the host work and then writes received values into the tpu tensors.
class StagedWork final : public c10d::Work {
 public:
  StagedWork(int rank, OpType op, const char* what, WorkPtr host, Tensors dev_out, Tensors host_bufs)
      : c10d::Work(rank, op), what_(what), host_(std::move(host)), dev_out_(std::move(dev_out)),
        host_bufs_(std::move(host_bufs)) {}
  bool isCompleted() override { return done_ || host_->isCompleted(); }
  bool isSuccess() const override { return host_->isSuccess(); }
  bool wait(std::chrono::milliseconds timeout) override {
    std::lock_guard<std::mutex> guard(mu_);
    if (done_) return true;
    try {
      host_->wait(timeout);
    } catch (const std::exception& e) {
      TORCH_CHECK(false, "tpu c10d backend: ", what_, " failed on rank ", rank_, ": ", e.what());
    }
    for (size_t i = 0; i < dev_out_.size(); ++i) unstage_one(dev_out_[i], host_bufs_[i]);
    done_ = true;
    return true;
  }
  void synchronize() override { wait(kNoTimeout); }
  std::vector<at::Tensor> result() override { return dev_out_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    wait(kNoTimeout);
    return completed_future(dev_out_);
  }

 private:
  const char* what_;
  WorkPtr host_;
  Tensors dev_out_;
  Tensors host_bufs_;  // the host side of the transfer, alive until it finishes
  std::mutex mu_;
  bool done_ = false;
};

class TpuBackend final : public c10d::Backend {
 public:
  TpuBackend(int rank, int size, c10::intrusive_ptr<c10d::Backend> host)
      : c10d::Backend(rank, size), host_(std::move(host)) {
    TORCH_CHECK(host_, "tpu c10d backend: no host backend");
  }
  const std::string getBackendName() const override { return "tpu"; }
  // Every collective goes through the host transport, so its sequence numbers are
  // this backend's: torch's mismatch check (TORCH_DISTRIBUTED_DEBUG=DETAIL wraps a
  // backend in ProcessGroupWrapper) compares them across ranks.
  void setSequenceNumberForGroup() override { host_->setSequenceNumberForGroup(); }
  uint64_t getSequenceNumberForGroup() override { return host_->getSequenceNumberForGroup(); }

  WorkPtr broadcast(Tensors& ts, const c10d::BroadcastOptions& o) override {
    return run("broadcast", OpType::BROADCAST, ts, ts, [&](Tensors& h, Tensors&) { return host_->broadcast(h, o); });
  }
  WorkPtr allreduce(Tensors& ts, const c10d::AllreduceOptions& o) override {
    return run_reducing("all_reduce", OpType::ALLREDUCE, ts, ts, o,
                        [&](Tensors& h, Tensors&, const auto& ho) { return host_->allreduce(h, ho); });
  }
  WorkPtr allreduce_coalesced(Tensors& ts, const c10d::AllreduceCoalescedOptions& o) override {
    return run_reducing("all_reduce_coalesced", OpType::ALLREDUCE_COALESCED, ts, ts, o,
                        [&](Tensors& h, Tensors&, const auto& ho) { return host_->allreduce_coalesced(h, ho); });
  }
  WorkPtr reduce(Tensors& ts, const c10d::ReduceOptions& o) override {
    return run_reducing("reduce", OpType::REDUCE, ts, ts, o,
                        [&](Tensors& h, Tensors&, const auto& ho) { return host_->reduce(h, ho); });
  }
  WorkPtr allgather(TensorLists& outs, Tensors& ins, const c10d::AllgatherOptions& o) override {
    return run_lists("all_gather", OpType::ALLGATHER, outs, ins,
                     [&](TensorLists& ho, Tensors& hi) { return host_->allgather(ho, hi, o); });
  }
  WorkPtr _allgather_base(at::Tensor& out, at::Tensor& in, const c10d::AllgatherOptions& o) override {
    // As NCCL, any output of world_size x input's elements: SyncBatchNorm gathers
    // (2C+1) values into a (1, world * (2C+1)) tensor, which gloo would split
    // along dim 0. Flat views of both (the output's aliases it) suit every shape.
    Tensors outs{out.is_contiguous() ? out.view({-1}) : out}, ins{in.reshape({-1})};
    return run("all_gather_into_tensor", OpType::_ALLGATHER_BASE, outs, ins,
               [&](Tensors& ho, Tensors& hi) { return host_->_allgather_base(ho[0], hi[0], o); });
  }
  WorkPtr allgather_into_tensor_coalesced(Tensors& outs, Tensors& ins,
                                          const c10d::AllgatherOptions& o) override {
    return run("all_gather_into_tensor_coalesced", OpType::COALESCED, outs, ins, [&](Tensors& ho, Tensors& hi) {
      return host_->allgather_into_tensor_coalesced(ho, hi, o);
    });
  }
  WorkPtr allgather_coalesced(TensorLists& outs, Tensors& ins, const c10d::AllgatherOptions& o) override {
    return run_lists("all_gather_coalesced", OpType::ALLGATHER_COALESCED, outs, ins,
                     [&](TensorLists& ho, Tensors& hi) { return host_->allgather_coalesced(ho, hi, o); });
  }
  WorkPtr gather(TensorLists& outs, Tensors& ins, const c10d::GatherOptions& o) override {
    return run_lists("gather", OpType::GATHER, outs, ins,
                     [&](TensorLists& ho, Tensors& hi) { return host_->gather(ho, hi, o); });
  }
  WorkPtr scatter(Tensors& outs, TensorLists& ins, const c10d::ScatterOptions& o) override {
    return run_in_lists("scatter", OpType::SCATTER, outs, ins,
                        [&](Tensors& ho, TensorLists& hi) { return host_->scatter(ho, hi, o); });
  }
  WorkPtr reduce_scatter(Tensors& outs, TensorLists& ins, const c10d::ReduceScatterOptions& o) override {
    return run_reducing("reduce_scatter", OpType::REDUCE_SCATTER, outs, ins, o,
                        [&](Tensors& ho, TensorLists& hi, const auto& opts) {
                          return host_->reduce_scatter(ho, hi, opts);
                        });
  }
  WorkPtr _reduce_scatter_base(at::Tensor& out, at::Tensor& in, const c10d::ReduceScatterOptions& o) override {
    Tensors outs{out}, ins{in};
    return run_reducing("reduce_scatter_tensor", OpType::_REDUCE_SCATTER_BASE, outs, ins, o,
                        [&](Tensors& ho, Tensors& hi, const auto& opts) {
                          return host_->_reduce_scatter_base(ho[0], hi[0], opts);
                        });
  }
  WorkPtr reduce_scatter_tensor_coalesced(Tensors& outs, Tensors& ins,
                                          const c10d::ReduceScatterOptions& o) override {
    return run_reducing("reduce_scatter_tensor_coalesced", OpType::REDUCE_SCATTER_TENSOR_COALESCED, outs, ins, o,
                        [&](Tensors& ho, Tensors& hi, const auto& opts) {
                          return host_->reduce_scatter_tensor_coalesced(ho, hi, opts);
                        });
  }
  WorkPtr alltoall_base(at::Tensor& out, at::Tensor& in, std::vector<int64_t>& out_splits,
                        std::vector<int64_t>& in_splits, const c10d::AllToAllOptions& o) override {
    Tensors outs{out}, ins{in};
    return run("all_to_all_single", OpType::ALLTOALL_BASE, outs, ins, [&](Tensors& ho, Tensors& hi) {
      return host_->alltoall_base(ho[0], hi[0], out_splits, in_splits, o);
    });
  }
  WorkPtr alltoall(Tensors& outs, Tensors& ins, const c10d::AllToAllOptions& o) override {
    return run("all_to_all", OpType::ALLTOALL, outs, ins,
               [&](Tensors& ho, Tensors& hi) { return host_->alltoall(ho, hi, o); });
  }
  WorkPtr send(Tensors& ts, int dst, int tag) override {
    Tensors host = stage("send", ts, true);
    return c10::make_intrusive<StagedWork>(getRank(), OpType::SEND, "send", host_->send(host, dst, tag),
                                           Tensors{}, host);
  }
  WorkPtr recv(Tensors& ts, int src, int tag) override {
    Tensors host = stage("recv", ts, false);
    return c10::make_intrusive<StagedWork>(getRank(), OpType::RECV, "recv", host_->recv(host, src, tag), ts,
                                           host);
  }
  WorkPtr recvAnysource(Tensors& ts, int tag) override {
    Tensors host = stage("recv", ts, false);
    return c10::make_intrusive<StagedWork>(getRank(), OpType::RECVANYSOURCE, "recv",
                                           host_->recvAnysource(host, tag), ts, host);
  }
  WorkPtr barrier(const c10d::BarrierOptions& o) override {
    c10d::BarrierOptions ho = o;
    ho.device_ids.clear();  // tpu device ids mean nothing to the host backend
    host_->barrier(ho)->wait();
    return c10::make_intrusive<DoneWork>(getRank(), OpType::BARRIER, Tensors{});
  }

 private:
  // Host copies of tpu tensors (a tensor both read and written is copied once).
  Tensors stage(const char* what, const Tensors& ts, bool copy_values) {
    Tensors host;
    host.reserve(ts.size());
    for (const at::Tensor& t : ts) {
      TORCH_CHECK(t.device().type() == kTpu, "tpu c10d backend: ", what, " got a tensor on ", t.device(),
                  "; this process group's tensors must be on tpu");
      host.push_back(host_like(t));
      if (copy_values) host.back().copy_(t);
    }
    return host;
  }
  static void unstage(Tensors& dst, const Tensors& host) {
    for (size_t i = 0; i < dst.size(); ++i) unstage_one(dst[i], host[i]);
  }
  WorkPtr finish(const char* what, OpType op, const WorkPtr& host_work, Tensors outputs) {
    // The host backend raises (with its message) if a peer failed or timed out.
    try {
      host_work->wait();
    } catch (const std::exception& e) {
      TORCH_CHECK(false, "tpu c10d backend: ", what, " failed on rank ", getRank(), ": ", e.what());
    }
    return c10::make_intrusive<DoneWork>(getRank(), op, std::move(outputs));
  }
  // Inputs and outputs are flat lists; when they are the same list the values
  // are staged once and written back.
  WorkPtr run(const char* what, OpType op, Tensors& outs, Tensors& ins,
              const std::function<WorkPtr(Tensors&, Tensors&)>& call) {
    const bool inplace = &outs == &ins;
    Tensors hin = stage(what, ins, true);
    Tensors hout = inplace ? hin : stage(what, outs, false);
    WorkPtr w = finish(what, op, call(hout, hin), outs);
    unstage(outs, hout);
    return w;
  }
  WorkPtr run_lists(const char* what, OpType op, TensorLists& outs, Tensors& ins,
                    const std::function<WorkPtr(TensorLists&, Tensors&)>& call) {
    Tensors hin = stage(what, ins, true);
    TensorLists hout;
    Tensors flat;
    for (Tensors& l : outs) {
      hout.push_back(stage(what, l, false));
      flat.insert(flat.end(), l.begin(), l.end());
    }
    WorkPtr w = finish(what, op, call(hout, hin), flat);
    for (size_t i = 0; i < outs.size(); ++i) unstage(outs[i], hout[i]);
    return w;
  }
  WorkPtr run_in_lists(const char* what, OpType op, Tensors& outs, TensorLists& ins,
                       const std::function<WorkPtr(Tensors&, TensorLists&)>& call) {
    TensorLists hin;
    for (Tensors& l : ins) hin.push_back(stage(what, l, true));
    Tensors hout = stage(what, outs, false);
    WorkPtr w = finish(what, op, call(hout, hin), outs);
    unstage(outs, hout);
    return w;
  }

  // gloo has neither AVG nor PREMUL_SUM (NCCL's sum of factor * x, which FSDP2
  // uses for a gradient divide factor): both run as a SUM on the host. PREMUL_SUM
  // scales each rank's own contribution before the sum (ranks may pass different
  // factors), so its factor goes on the staged host inputs, which are this
  // backend's own; AVG divides the sum by the group size (floating point only, as
  // an integer average would round). Checked before any data moves, so a bad call
  // never leaves the peers half-reduced. `call` gets the host tensors and the
  // options with the host's op.
  template <typename Ins, typename Opts, typename Call>
  WorkPtr run_reducing(const char* what, OpType op, Tensors& outs, Ins& ins, const Opts& o, Call call) {
    check_op(what, o.reduceOp, outs);
    Opts host_opts = o;
    if (scaled(o.reduceOp)) host_opts.reduceOp = c10d::ReduceOp(c10d::ReduceOp::SUM);
    const std::optional<at::Tensor> factor = premul_factor(o.reduceOp);
    auto body = [&](Tensors& ho, Ins& hi) {
      if (factor) premul(*factor, hi);
      return call(ho, hi, host_opts);
    };
    WorkPtr w;
    if constexpr (std::is_same_v<Ins, TensorLists>) w = run_in_lists(what, op, outs, ins, body);
    else w = run(what, op, outs, ins, body);
    if (o.reduceOp.op_ == c10d::ReduceOp::AVG) {
      for (at::Tensor& t : outs) t.div_(getSize());
    }
    return w;
  }
  static bool scaled(const c10d::ReduceOp& op) {
    return op.op_ == c10d::ReduceOp::AVG || op.op_ == c10d::ReduceOp::PREMUL_SUM;
  }
  static void check_op(const char* what, const c10d::ReduceOp& op, const Tensors& outputs) {
    if (!scaled(op)) return;
    const char* name = op.op_ == c10d::ReduceOp::AVG ? "AVG" : "PREMUL_SUM";
    TORCH_CHECK(op.op_ != c10d::ReduceOp::PREMUL_SUM || op.supplement_, "tpu c10d backend: ", what,
                " with ReduceOp.PREMUL_SUM needs a factor");
    for (const at::Tensor& t : outputs) {
      TORCH_CHECK(at::isFloatingType(t.scalar_type()) || at::isComplexType(t.scalar_type()),
                  "tpu c10d backend: ", what, " with ReduceOp.", name, " needs a floating-point tensor, got ",
                  t.scalar_type());
    }
  }
  // PREMUL_SUM's factor on the host, read once per call (a tpu tensor factor is a
  // download); a double factor as a 0-dim tensor, which multiplies as the scalar would.
  static std::optional<at::Tensor> premul_factor(const c10d::ReduceOp& op) {
    if (op.op_ != c10d::ReduceOp::PREMUL_SUM) return std::nullopt;
    const auto* f = static_cast<const c10d::PreMulSumSupplement*>(op.supplement_.get());
    if (f->tensor_factor.defined()) return f->tensor_factor.to(at::kCPU);
    return at::scalar_tensor(f->double_factor, at::kDouble);
  }
  static void premul(const at::Tensor& factor, Tensors& host_ins) {
    for (at::Tensor& t : host_ins) t.mul_(factor);
  }
  static void premul(const at::Tensor& factor, TensorLists& host_ins) {
    for (Tensors& l : host_ins) premul(factor, l);
  }

  c10::intrusive_ptr<c10d::Backend> host_;
};

}  // namespace

void register_c10d(py::module& m) {
  py::object base = py::module::import("torch._C._distributed_c10d").attr("Backend");
  py::class_<TpuBackend, c10::intrusive_ptr<TpuBackend>>(m, "TpuBackend", base)
      .def(py::init<int, int, c10::intrusive_ptr<c10d::Backend>>(), py::arg("rank"), py::arg("size"),
           py::arg("host"));
}

}  // namespace torchtpu
