// Aten argument values → tpu_arg_t (op_io.h).
#include <cstring>

#include "op_io.h"

namespace torchtpu {

c10::TypePtr unwrap_optional(const c10::TypePtr& t) {
  if (t->kind() == c10::TypeKind::OptionalType) return t->castRaw<c10::OptionalType>()->getElementType();
  return t;
}

bool is_tensor_type(const c10::TypePtr& t) { return t->kind() == c10::TypeKind::TensorType; }

bool is_tensor_list_type(const c10::TypePtr& t) {
  if (t->kind() != c10::TypeKind::ListType) return false;
  return unwrap_optional(t->castRaw<c10::ListType>()->getElementType())->kind() == c10::TypeKind::TensorType;
}

bool is_write(const c10::Argument& a) { return a.alias_info() != nullptr && a.alias_info()->isWrite(); }

tpu_scalar_t scalar_from(const c10::Scalar& s, const std::string& full) {
  tpu_scalar_t v;
  std::memset(&v, 0, sizeof(v));
  v.wrapped = true;
  if (s.isBoolean()) {
    v.dtype = TPU_BOOL;
    v.i = s.toBool() ? 1 : 0;
  } else if (s.isIntegral(false)) {
    // A uint64 value past INT64_MAX (a HAS_u scalar) travels as its bit pattern,
    // and its dtype says to read it unsigned (tpu_scalar_to_double).
    bool u = s.type() == c10::ScalarType::UInt64;
    v.dtype = u ? TPU_U64 : TPU_I64;
    v.i = u ? static_cast<int64_t>(s.to<uint64_t>()) : s.toLong();
  } else if (s.isFloatingPoint()) {
    v.dtype = TPU_F64;
    v.f = s.toDouble();
  } else {
    TORCH_CHECK(s.isComplex(), "tpu: ", full, ": unsupported scalar type ", s.type());
    const c10::complex<double> z = s.toComplexDouble();
    v.dtype = TPU_C128;
    v.f = z.real();
    v.imag = z.imag();
  }
  return v;
}

// A 0-dim cpu tensor passed where a tpu tensor is expected: a runtime scalar operand.
tpu_scalar_t scalar_from_cpu_tensor(const at::Tensor& t) {
  tpu_scalar_t v;
  std::memset(&v, 0, sizeof(v));
  v.dtype = tpu_dtype_of(t.scalar_type());
  v.wrapped = t.unsafeGetTensorImpl()->is_wrapped_number();
  // Read in place: item() is a dispatched op, and a Python number reaches here
  // as a wrapped cpu tensor on every `x + 0.5`.
  switch (t.scalar_type()) {
    case c10::ScalarType::Double: v.f = *t.const_data_ptr<double>(); break;
    case c10::ScalarType::Long: v.i = *t.const_data_ptr<int64_t>(); break;
    case c10::ScalarType::Bool: v.i = *t.const_data_ptr<bool>() ? 1 : 0; break;
    // A Python int past INT64_MAX arrives as a wrapped uint64: its bit pattern.
    case c10::ScalarType::UInt64: v.i = static_cast<int64_t>(*t.const_data_ptr<uint64_t>()); break;
    case c10::ScalarType::ComplexDouble: {
      const c10::complex<double> z = *t.const_data_ptr<c10::complex<double>>();
      v.f = z.real();
      v.imag = z.imag();
      break;
    }
    case c10::ScalarType::ComplexFloat: {
      const c10::complex<float> z = *t.const_data_ptr<c10::complex<float>>();
      v.f = z.real();
      v.imag = z.imag();
      break;
    }
    default:  // ComplexHalf never gets here: tpu_dtype_of refused it above
      if (t.is_floating_point()) {
        v.f = t.item<double>();
      } else {
        v.i = t.item<int64_t>();
      }
  }
  return v;
}

bool tensor_operand(const at::Tensor& t, int* device, const std::string& full, tpu_arg_t* out) {
  if (t.device().type() == kTpu) {
    const int d = t.device().index();
    if (*device >= 0 && *device != d) return false;
    *device = d;
    std::memset(out, 0, sizeof(*out));
    out->kind = TPU_ARG_TENSOR;
    out->u.tensor = describe(t);
    return true;
  }
  if (!t.device().is_cpu() || t.dim() != 0) return false;
  std::memset(out, 0, sizeof(*out));
  out->kind = TPU_ARG_SCALAR;
  out->u.scalar = scalar_from_cpu_tensor(t);
  return true;
}

std::string aten_base_name(const std::string& schema_name) {
  std::string name = schema_name;
  if (name.rfind("aten::", 0) == 0) name = name.substr(6);
  if (name.size() >= 2 && name.back() == '_' && name[name.size() - 2] != '_') name.pop_back();
  return name;
}

int64_t int_of(const c10::IValue& v) {
  if (v.isSymInt()) return v.toSymInt().guard_int(__FILE__, __LINE__);
  return v.toInt();
}

namespace {

// An int, float or bool list.
bool marshal_list(const c10::Argument& a, const c10::TypePtr& t, const c10::IValue& v, ArgStore& store,
                  const std::string& full, tpu_arg_t* out, int* list_elems) {
  const c10::TypePtr et = unwrap_optional(t->castRaw<c10::ListType>()->getElementType());
  const auto elems = v.toListRef();
  const int n = static_cast<int>(elems.size());
  out->u.list.n = n;
  switch (et->kind()) {
    case c10::TypeKind::TensorType: return false;
    case c10::TypeKind::IntType:
    case c10::TypeKind::SymIntType: {
      auto& vec = store.ints.emplace_back(n);
      for (int k = 0; k < n; ++k) vec[k] = int_of(elems[k]);
      out->kind = TPU_ARG_INT_LIST;
      out->u.list.ints = vec.data();
      *list_elems += n;
      return true;
    }
    case c10::TypeKind::FloatType: {
      auto& vec = store.floats.emplace_back(n);
      for (int k = 0; k < n; ++k) vec[k] = elems[k].toDouble();
      out->kind = TPU_ARG_FLOAT_LIST;
      out->u.list.floats = vec.data();
      return true;
    }
    case c10::TypeKind::BoolType: {
      auto& vec = store.bools.emplace_back(new bool[n > 0 ? n : 1]);
      for (int k = 0; k < n; ++k) vec[k] = elems[k].toBool();
      out->kind = TPU_ARG_BOOL_LIST;
      out->u.list.bools = vec.get();
      return true;
    }
    case c10::TypeKind::NumberType: {  // Scalar[]: ints stay ints unless a float is among them
      bool floats = false;
      for (int k = 0; k < n; ++k) floats = floats || !elems[k].toScalar().isIntegral(/*includeBool=*/true);
      if (floats) {
        auto& vec = store.floats.emplace_back(n);
        for (int k = 0; k < n; ++k) vec[k] = elems[k].toScalar().toDouble();
        out->kind = TPU_ARG_FLOAT_LIST;
        out->u.list.floats = vec.data();
      } else {
        auto& vec = store.ints.emplace_back(n);
        for (int k = 0; k < n; ++k) vec[k] = elems[k].toScalar().toLong();
        out->kind = TPU_ARG_INT_LIST;
        out->u.list.ints = vec.data();
      }
      return true;
    }
    default:
      TORCH_CHECK(false, "tpu: ", full, ": argument '", a.name(), "' of type ", *a.type(), " is not supported");
  }
}

}  // namespace

bool marshal_static(const c10::Argument& a, const c10::TypePtr& t, const c10::IValue& v, ArgStore& store,
                    const std::string& full, tpu_arg_t* out, int* list_elems) {
  tpu_arg_t arg;
  std::memset(&arg, 0, sizeof(arg));
  arg.kind = TPU_ARG_NONE;
  switch (t->kind()) {
    case c10::TypeKind::TensorType: return false;
    case c10::TypeKind::ListType:
      if (!marshal_list(a, t, v, store, full, &arg, list_elems)) return false;
      break;
    case c10::TypeKind::IntType:
    case c10::TypeKind::SymIntType:
      arg.kind = TPU_ARG_INT;
      arg.u.i = int_of(v);
      break;
    case c10::TypeKind::FloatType:
    case c10::TypeKind::SymFloatType:
      arg.kind = TPU_ARG_FLOAT;
      arg.u.f = v.isSymFloat() ? v.toSymFloat().guard_float(__FILE__, __LINE__) : v.toDouble();
      break;
    case c10::TypeKind::BoolType:
    case c10::TypeKind::SymBoolType:
      if (a.name() == "pin_memory") break;
      arg.kind = TPU_ARG_BOOL;
      arg.u.b = v.isSymBool() ? v.toSymBool().guard_bool(__FILE__, __LINE__) : v.toBool();
      break;
    case c10::TypeKind::NumberType:
      arg.kind = TPU_ARG_SCALAR;
      arg.u.scalar = scalar_from(v.toScalar(), full);
      break;
    case c10::TypeKind::ScalarTypeType:
      arg.kind = TPU_ARG_DTYPE;
      arg.u.dtype = tpu_dtype_of(v.toScalarType());
      break;
    case c10::TypeKind::LayoutType:
    case c10::TypeKind::MemoryFormatType:
    case c10::TypeKind::DeviceObjType:
      break;
    case c10::TypeKind::StringType:
      arg.kind = TPU_ARG_STRING;
      arg.u.str = store.strings.emplace_back(v.toStringRef()).c_str();
      break;
    case c10::TypeKind::GeneratorType:
      arg.kind = TPU_ARG_GENERATOR;
      arg.u.generator = generator_state(v.toGenerator());
      break;
    default:
      TORCH_CHECK(false, "tpu: ", full, ": argument '", a.name(), "' of type ", *a.type(), " is not supported");
  }
  *out = arg;
  return true;
}

}  // namespace torchtpu
