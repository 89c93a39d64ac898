// Python access to the runtime's graphs (runtime/include/torchtpu/graph.h):
// torch.compile's backend (torchtpu/compile.py) walks an FX graph and records
// each aten node here; arguments are converted by the fallback's own marshal
// code (op_io.h) against the op's schema, so a node sees what the eager op sees.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/extension.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "op_io.h"
#include "torchtpu/graph.h"

namespace py = pybind11;

namespace torchtpu {
namespace {

// A reference to a graph value in an argument list; `scalar_dtype` is the
// torch dtype a Scalar read from it has (set for scalar inputs).
struct Value {
  int32_t id;
  py::object scalar_dtype;
};

struct Graph {
  tpu_graph_t* g = nullptr;
  Graph() { check_status(tpu_graph_create(&g), "tpu.graph"); }
  ~Graph() { tpu_graph_destroy(g); }
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
};

tpu_arg_t value_arg(const Value& v, const c10::TypePtr& t, const std::string& full) {
  tpu_arg_t arg;
  std::memset(&arg, 0, sizeof(arg));
  if (t->kind() == c10::TypeKind::TensorType) {
    arg.kind = TPU_ARG_VALUE;
    arg.u.value = v.id;
    return arg;
  }
  // A Scalar, int, float or bool read from the program (a scalar input, a
  // symbolic size): lowerings that cannot take a runtime value there fail the
  // op when they read it (tpu_op_is_runtime), never see a placeholder.
  TORCH_CHECK(!v.scalar_dtype.is_none(), "tpu.graph: ", full, ": a tensor value where a scalar is expected");
  arg.kind = TPU_ARG_VALUE_SCALAR;
  arg.u.scalar.dtype = tpu_dtype_of(torch::python::detail::py_object_to_dtype(v.scalar_dtype));
  arg.u.scalar.wrapped = true;
  arg.u.scalar.i = v.id;
  return arg;
}

tpu_arg_t value_list_arg(const py::list& items, ArgStore& store) {
  auto& ids = store.values.emplace_back(items.size());
  for (size_t k = 0; k < items.size(); ++k) {
    ids[k] = items[k].is_none() ? -1 : items[k].cast<const Value&>().id;
  }
  tpu_arg_t arg;
  std::memset(&arg, 0, sizeof(arg));
  arg.kind = TPU_ARG_VALUE_LIST;
  arg.u.list.n = static_cast<int32_t>(ids.size());
  arg.u.list.values = ids.data();
  return arg;
}

// Records `qualname.overload` (e.g. "aten::add", "Tensor") with `args`, one per
// schema argument without out= arguments (Values for tensors); returns the id
// of its first result.
int32_t apply(Graph& graph, const std::string& qualname, const std::string& overload, const py::list& args,
              int nresults, const py::object& out_dtype) {
  const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow(qualname.c_str(), overload.c_str());
  const c10::FunctionSchema& schema = op.schema();
  const std::string full = qualname + (overload.empty() ? "" : "." + overload);
  ArgStore store;
  std::vector<tpu_arg_t> targs;
  size_t k = 0;
  int list_elems = 0;
  for (const c10::Argument& a : schema.arguments()) {
    if (is_write(a) && a.kwarg_only()) continue;
    TORCH_CHECK(k < args.size(), "tpu.graph: ", full, ": ", args.size(), " arguments given");
    py::handle obj = args[k++];
    const c10::TypePtr t = unwrap_optional(a.real_type());
    tpu_arg_t arg;
    std::memset(&arg, 0, sizeof(arg));
    if (obj.is_none()) {
      arg.kind = TPU_ARG_NONE;
    } else if (py::isinstance<Value>(obj)) {
      arg = value_arg(obj.cast<const Value&>(), t, full);
    } else if (t->kind() == c10::TypeKind::TensorType) {
      // A Python number where the schema has a Tensor (add.Tensor(x, 1.0)): a
      // wrapped number, as eager PyTorch makes it; constant in the program.
      arg.kind = TPU_ARG_SCALAR;
      arg.u.scalar = scalar_from(torch::jit::toIValue(obj, c10::NumberType::get()).toScalar(), full);
    } else if (is_tensor_list_type(t)) {
      arg = value_list_arg(py::reinterpret_borrow<py::list>(obj), store);
    } else {
      const c10::IValue v = torch::jit::toIValue(obj, a.real_type());
      TORCH_CHECK(v.isNone() || marshal_static(a, t, v, store, full, &arg, &list_elems), "tpu.graph: ", full,
                  ": argument '", a.name(), "' must be a graph value");
    }
    targs.push_back(arg);
  }
  TORCH_CHECK(k == args.size(), "tpu.graph: ", full, ": ", args.size(), " arguments given, it takes ", k);
  if (!out_dtype.is_none()) {  // a factory lowered for its out= form takes the dtype last
    tpu_arg_t arg;
    std::memset(&arg, 0, sizeof(arg));
    arg.kind = TPU_ARG_DTYPE;
    arg.u.dtype = tpu_dtype_of(torch::python::detail::py_object_to_dtype(out_dtype));
    targs.push_back(arg);
  }
  int32_t first = -1;
  const std::string name = aten_base_name(schema.name());
  check_status(tpu_graph_apply(graph.g, name.c_str(), overload.c_str(), targs.data(), static_cast<int>(targs.size()),
                               nresults, &first),
               "tpu.graph: " + full);
  return first;
}

// One input of a run: a tpu tensor, a 0-dim cpu tensor or a Python number. A
// tensor with the conjugate or negative bit (a lazy `conj()` view that a graph
// saved for backward) is resolved into `keep` first: a program reads storages,
// not the dispatcher's view bits, which eager ops resolve before they run.
tpu_arg_t run_input(py::handle obj, int* device, const std::string& what, std::vector<at::Tensor>* keep) {
  tpu_arg_t arg;
  std::memset(&arg, 0, sizeof(arg));
  if (THPVariable_Check(obj.ptr())) {
    at::Tensor t = THPVariable_Unpack(obj.ptr());
    if (t.is_conj() || t.is_neg()) {
      keep->push_back(t.resolve_conj().resolve_neg());
      t = keep->back();
    }
    if (tensor_operand(t, device, what, &arg)) return arg;
    TORCH_CHECK(t.device().type() != kTpu,
                "Expected all tensors to be on the same device, but found at least two devices, tpu:", *device,
                " and ", t.device(), "!");
    TORCH_CHECK(false, "Expected all tensors to be on the same device, but found ", t.device(), " (", what, ")");
  }
  arg.kind = TPU_ARG_SCALAR;
  arg.u.scalar = scalar_from(torch::jit::toIValue(obj, c10::NumberType::get()).toScalar(), what);
  return arg;
}

py::list run(Graph& graph, const py::list& inputs) {
  std::vector<tpu_arg_t> args;
  std::vector<at::Tensor> resolved;  // keeps resolved inputs' storages alive until the run has taken them
  int device = -1;
  for (py::handle obj : inputs) args.push_back(run_input(obj, &device, "graph input", &resolved));
  if (device < 0) device = current_device();
  const int nout = tpu_graph_num_outputs(graph.g);
  Results rs(nout);
  tpu_status_t* st = nullptr;
  {
    py::gil_scoped_release nogil;  // a first run compiles
    st = tpu_graph_run(graph.g, device, args.data(), static_cast<int>(args.size()), nout, rs.r.data(), &rs.n);
  }
  check_status(st, "tpu.graph");
  py::list out;
  for (int i = 0; i < rs.n; ++i) out.append(py::reinterpret_steal<py::object>(THPVariable_Wrap(wrap_result(rs, i, "tpu.graph"))));
  return out;
}

// Starts the program a run with inputs like `inputs` would build (graph.h's
// tpu_graph_prepare). Each input is as run()'s, or a layout tuple (dtype, sizes,
// strides, storage_offset, storage_nbytes) standing for a tpu tensor that an op
// will produce: it gets a storage never written, which holds no device memory.
// `device`: where the run will be (every tensor input's device).
void prepare(Graph& graph, const py::list& inputs, int device) {
  struct Placeholders {  // released however the call ends
    std::vector<tpu_storage_t*> s;
    ~Placeholders() {
      for (tpu_storage_t* p : s) tpu_storage_release(p);
    }
  } placeholders;
  std::vector<tpu_arg_t> args;
  std::vector<at::Tensor> resolved;
  for (py::handle obj : inputs) {
    if (!py::isinstance<py::tuple>(obj)) {
      args.push_back(run_input(obj, &device, "graph input", &resolved));
      continue;
    }
    auto t = obj.cast<py::tuple>();
    TORCH_CHECK(t.size() == 5, "tpu.graph: a layout is (dtype, sizes, strides, storage_offset, storage_nbytes)");
    auto sizes = t[1].cast<std::vector<int64_t>>();
    auto strides = t[2].cast<std::vector<int64_t>>();
    TORCH_CHECK(sizes.size() == strides.size() && sizes.size() <= TPU_MAX_RANK, "tpu.graph: layout of rank ",
                sizes.size(), " with ", strides.size(), " strides");
    tpu_arg_t arg;
    std::memset(&arg, 0, sizeof(arg));
    arg.kind = TPU_ARG_TENSOR;
    arg.u.tensor.dtype = tpu_dtype_of(torch::python::detail::py_object_to_dtype(t[0]));
    arg.u.tensor.rank = static_cast<int32_t>(sizes.size());
    std::copy(sizes.begin(), sizes.end(), arg.u.tensor.sizes);
    std::copy(strides.begin(), strides.end(), arg.u.tensor.strides);
    arg.u.tensor.offset = t[3].cast<int64_t>();
    const int64_t nbytes = t[4].cast<int64_t>();
    TORCH_CHECK(nbytes >= 0, "tpu.graph: layout of a storage of ", nbytes, " bytes");
    placeholders.s.push_back(nullptr);
    check_status(tpu_storage_create(device, static_cast<size_t>(nbytes), &placeholders.s.back()), "tpu.graph");
    arg.u.tensor.storage = placeholders.s.back();
    args.push_back(arg);
  }
  tpu_status_t* st = nullptr;
  {
    py::gil_scoped_release nogil;  // lowering a large graph takes a while
    st = tpu_graph_prepare(graph.g, device, args.data(), static_cast<int>(args.size()));
  }
  check_status(st, "tpu.graph");
}

}  // namespace

void register_graph(py::module& m) {
  m.def("op_supported", [](const std::string& name) { return tpu_op_supported(name.c_str()); });
  m.def("op_wants_out_dtype", [](const std::string& name) { return tpu_op_wants_out_dtype(name.c_str()); });
  py::class_<Value>(m, "GraphValue")
      .def(py::init([](int32_t id, py::object scalar_dtype) { return Value{id, std::move(scalar_dtype)}; }),
           py::arg("id"), py::arg("scalar_dtype") = py::none())
      .def_readonly("id", &Value::id)
      .def("__repr__", [](const Value& v) { return "GraphValue(" + std::to_string(v.id) + ")"; });
  py::class_<Graph>(m, "Graph")
      .def(py::init<>())
      .def(
          "add_input",
          [](Graph& g, bool tensor) {
            int32_t id = -1;
            check_status(tpu_graph_add_input(g.g, tensor ? TPU_ARG_TENSOR : TPU_ARG_SCALAR, &id), "tpu.graph");
            return id;
          },
          py::arg("tensor") = true)
      .def("apply", &apply, py::arg("qualname"), py::arg("overload"), py::arg("args"), py::arg("nresults"),
           py::arg("out_dtype") = py::none())
      .def("set_outputs",
           [](Graph& g, const std::vector<int32_t>& ids) {
             check_status(tpu_graph_set_outputs(g.g, static_cast<int>(ids.size()), ids.data()), "tpu.graph");
           })
      .def("alias",
           [](Graph& g, int output, int input) { check_status(tpu_graph_alias(g.g, output, input), "tpu.graph"); })
      .def_property_readonly("num_ops", [](const Graph& g) { return tpu_graph_num_ops(g.g); })
      .def("run", &run)
      .def("prepare", &prepare, py::arg("inputs"), py::arg("device"));
}

}  // namespace torchtpu
