/* Element types: sizes, spellings and PyTorch's promotion / casting rules. */
#include "torchtpu/dtype.h"

#include <assert.h>

typedef struct dtype_info {
  size_t size;
  const char* mlir;
  const char* name;
  bool is_float;
  bool is_complex;
  bool is_int;
  bool is_signed; /* PyTorch's isSignedType: true for floats and complex too */
} dtype_info_t;

static const dtype_info_t kInfo[] = {
    [TPU_BOOL] = {1, "i1", "bool", false, false, false, false},
    [TPU_U8] = {1, "ui8", "uint8", false, false, true, false},
    [TPU_I8] = {1, "i8", "int8", false, false, true, true},
    [TPU_I16] = {2, "i16", "int16", false, false, true, true},
    [TPU_I32] = {4, "i32", "int32", false, false, true, true},
    [TPU_I64] = {8, "i64", "int64", false, false, true, true},
    [TPU_F16] = {2, "f16", "float16", true, false, false, true},
    [TPU_BF16] = {2, "bf16", "bfloat16", true, false, false, true},
    [TPU_F32] = {4, "f32", "float32", true, false, false, true},
    [TPU_F64] = {8, "f64", "float64", true, false, false, true},
    [TPU_C64] = {8, "complex<f32>", "complex64", false, true, false, true},
    [TPU_C128] = {16, "complex<f64>", "complex128", false, true, false, true},
    [TPU_U16] = {2, "ui16", "uint16", false, false, true, false},
    [TPU_U32] = {4, "ui32", "uint32", false, false, true, false},
    [TPU_U64] = {8, "ui64", "uint64", false, false, true, false},
};
static_assert(sizeof kInfo / sizeof kInfo[0] == TPU_DTYPE_COUNT, "one row per dtype");

/* torch.promote_types, generated from torch 2.13 and checked in tests. */
#define B TPU_BOOL
#define U8 TPU_U8
#define I8 TPU_I8
#define I16 TPU_I16
#define I32 TPU_I32
#define I64 TPU_I64
#define F16 TPU_F16
#define BF TPU_BF16
#define F32 TPU_F32
#define F64 TPU_F64
#define C64 TPU_C64
#define C128 TPU_C128
#define U16 TPU_U16
#define U32 TPU_U32
#define U64 TPU_U64
static const unsigned char kPromote[TPU_DTYPE_COUNT][TPU_DTYPE_COUNT] = {
    /*          B     U8    I8    I16   I32   I64   F16   BF    F32   F64   C64   C128  U16  U32  U64 */
    /* B    */ {B, U8, I8, I16, I32, I64, F16, BF, F32, F64, C64, C128, U16, U32, U64},
    /* U8   */ {U8, U8, I16, I16, I32, I64, F16, BF, F32, F64, C64, C128, U16, U32, U64},
    /* I8   */ {I8, I16, I8, I16, I32, I64, F16, BF, F32, F64, C64, C128, I64, I64, I64},
    /* I16  */ {I16, I16, I16, I16, I32, I64, F16, BF, F32, F64, C64, C128, I64, I64, I64},
    /* I32  */ {I32, I32, I32, I32, I32, I64, F16, BF, F32, F64, C64, C128, I64, I64, I64},
    /* I64  */ {I64, I64, I64, I64, I64, I64, F16, BF, F32, F64, C64, C128, I64, I64, I64},
    /* F16  */ {F16, F16, F16, F16, F16, F16, F16, F32, F32, F64, C64, C128, F16, F16, F16},
    /* BF   */ {BF, BF, BF, BF, BF, BF, F32, BF, F32, F64, C64, C128, BF, BF, BF},
    /* F32  */ {F32, F32, F32, F32, F32, F32, F32, F32, F32, F64, C64, C128, F32, F32, F32},
    /* F64  */ {F64, F64, F64, F64, F64, F64, F64, F64, F64, F64, C128, C128, F64, F64, F64},
    /* C64  */ {C64, C64, C64, C64, C64, C64, C64, C64, C64, C128, C64, C128, C64, C64, C64},
    /* C128 */ {C128, C128, C128, C128, C128, C128, C128, C128, C128, C128, C128, C128, C128, C128, C128},
    /* shell unsigned types: PyTorch leaves mixed integer promotion undefined; we widen */
    /* U16  */ {U16, U16, I64, I64, I64, I64, F16, BF, F32, F64, C64, C128, U16, U32, U64},
    /* U32  */ {U32, U32, I64, I64, I64, I64, F16, BF, F32, F64, C64, C128, U32, U32, U64},
    /* U64  */ {U64, U64, I64, I64, I64, I64, F16, BF, F32, F64, C64, C128, U64, U64, U64},
};
#undef B
#undef U8
#undef I8
#undef I16
#undef I32
#undef I64
#undef F16
#undef BF
#undef F32
#undef F64
#undef C64
#undef C128
#undef U16
#undef U32
#undef U64
static_assert(sizeof kPromote / sizeof kPromote[0] == TPU_DTYPE_COUNT, "square table");

bool tpu_dtype_valid(int t) { return t >= 0 && t < TPU_DTYPE_COUNT; }

/* Invalid dtypes read as a zero-size, nameless type rather than crash. */
static const dtype_info_t* info(tpu_dtype_t t) {
  static const dtype_info_t kNone = {0, "?", "?", false, false, false, false};
  return tpu_dtype_valid((int)t) ? &kInfo[t] : &kNone;
}

size_t tpu_dtype_size(tpu_dtype_t t) { return info(t)->size; }
const char* tpu_dtype_mlir(tpu_dtype_t t) { return info(t)->mlir; }
const char* tpu_dtype_name(tpu_dtype_t t) { return info(t)->name; }
bool tpu_dtype_is_float(tpu_dtype_t t) { return info(t)->is_float; }
bool tpu_dtype_is_complex(tpu_dtype_t t) { return info(t)->is_complex; }
bool tpu_dtype_is_int(tpu_dtype_t t) { return info(t)->is_int; }
bool tpu_dtype_is_signed(tpu_dtype_t t) { return info(t)->is_signed; }

const char* tpu_dtype_scalar_type_name(tpu_dtype_t t) {
  static const char* const kNames[] = {
      [TPU_BOOL] = "Bool",  [TPU_U8] = "Byte",          [TPU_I8] = "Char",           [TPU_I16] = "Short",
      [TPU_I32] = "Int",    [TPU_I64] = "Long",         [TPU_F16] = "Half",          [TPU_BF16] = "BFloat16",
      [TPU_F32] = "Float",  [TPU_F64] = "Double",       [TPU_C64] = "ComplexFloat",  [TPU_C128] = "ComplexDouble",
      [TPU_U16] = "UInt16", [TPU_U32] = "UInt32",       [TPU_U64] = "UInt64",
  };
  static_assert(sizeof kNames / sizeof kNames[0] == TPU_DTYPE_COUNT, "one name per dtype");
  return tpu_dtype_valid((int)t) ? kNames[t] : "?";
}

tpu_dtype_t tpu_dtype_promote(tpu_dtype_t a, tpu_dtype_t b) {
  if (!tpu_dtype_valid((int)a)) return b;
  if (!tpu_dtype_valid((int)b)) return a;
  return (tpu_dtype_t)kPromote[a][b];
}

/* c10::canCast. */
bool tpu_dtype_can_cast(tpu_dtype_t from, tpu_dtype_t to) {
  if (tpu_dtype_is_complex(from) && !tpu_dtype_is_complex(to)) return false;
  if (tpu_dtype_is_float(from) && (tpu_dtype_is_int(to) || to == TPU_BOOL)) return false;
  if (from != TPU_BOOL && to == TPU_BOOL) return false;
  return true;
}

tpu_dtype_t tpu_dtype_to_float(tpu_dtype_t t) {
  return (tpu_dtype_is_float(t) || tpu_dtype_is_complex(t)) ? t : TPU_F32;
}

tpu_dtype_t tpu_dtype_opmath(tpu_dtype_t t) {
  return (t == TPU_F16 || t == TPU_BF16) ? TPU_F32 : t;
}
