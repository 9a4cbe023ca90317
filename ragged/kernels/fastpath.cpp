// The triton backend's two hot calls in C++ over at::Tensor: varlen_attention(...,
// validate=False) (``attention``, the same checks as kernels/attention.py's launch_ready) and a
// LayoutAttention's kept launch (``layout``, as kernels/attention.py's ``kept_launch``).
//
// Each returns the output tensor when it launched, or None when anything differs from the
// common case: the caller then takes the Python path, which decides (and says what is wrong).
// Python reads each shape, stride and dtype as a new object; here they are fields of the
// TensorImpl, the output comes from at::empty_like without the Python argument parser, and
// the kernel goes to cuLaunchKernel directly. Measured figures: docs/kernel.md.
//
// What the Python side keeps (read on every call from the context, so a monkeypatch holds):
//   kernels.kept.ready_spans  {(device, dtype, head_dim):
//                         ((lo, hi, direct, block_m, default_scale x log2 e, spec), ...)}
//                        (each span: every max_seqlen from lo to hi launches that kernel)
//   kernels.launch            SINGLE_DEVICE, current_device, raw_stream, _runtime_knobs
//   the LayoutAttention       kept (a KeptLaunch or None: its numbers from its image,
//                             an Image made by ``image``), cu_seqlens, max_seqlen
// ``spec`` is (CUfunction, threads per block, shared bytes) of a kernel whose parameters are
// the ones below (kPointers, kInts; kernels.attention.launch_spec checks that), or None: then
// ``direct``, a Python callable taking (grid_x, 1, 1, stream, *pointers, *scalars), launches.

#include <Python.h>
#include <dlfcn.h>

#include <ATen/PythonTorchFunctionTLS.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/empty_native.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cstdint>
#include <cstring>

namespace {

// The attention kernel's runtime parameters: Q, K, V, O, cu_seqlens, qk_scale (fp32), eight
// strides, num_heads, num_m_blocks (i32); then Triton's global and profile scratch pointers.
constexpr int kPointers = 5, kInts = 10;

// What a call reads, its first three arguments (bound by kernels/fastpath.py: two revisions of
// ragged loaded in one process, as the paired A/B does, share this module but not these).
struct Context {
  PyObject *tensor_type, *kept_module, *launch_module;
};
constexpr int kContext = 3;

bool context(PyObject *const *args, Context *c) {
  if (!PyType_Check(args[0])) {
    PyErr_SetString(PyExc_TypeError, "the first argument is torch.Tensor");
    return false;
  }
  *c = {args[0], args[1], args[2]};
  return true;
}

PyObject *s_ready, *s_single, *s_current, *s_stream, *s_knobs, *s_enter, *s_calls, *s_launch,
    *s_cu_seqlens, *s_max_seqlen;

using LaunchFn = int (*)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                         unsigned, void *, void **, void **);
using ErrorFn = int (*)(int, const char **);
// cuLaunchKernelEx's arguments, laid out as cuda.h's CUlaunchConfig and CUlaunchAttribute
// (this file is built without the CUDA headers): one attribute, programmatic stream
// serialisation (id 6), for a programmatic dependent launch.
struct LaunchAttribute {
  int id;
  char pad[4];
  union {
    char pad[64];
    int allowed;
  } value;
};
struct LaunchConfig {
  unsigned grid_x, grid_y, grid_z, block_x, block_y, block_z, shared;
  void *stream;
  LaunchAttribute *attrs;
  unsigned num_attrs;
};
constexpr int kProgrammaticStreamSerialization = 6;
using LaunchExFn = int (*)(const LaunchConfig *, void *, void **, void **);
LaunchFn cu_launch = nullptr;
LaunchExFn cu_launch_ex = nullptr;
ErrorFn cu_error = nullptr;

// torch's CUDA kernel of at::empty (at::native::empty_cuda: the caching allocator, and the
// deterministic fill where torch.use_deterministic_algorithms asks for it), found in the
// loaded libtorch_cuda; null where it is not (a CPU build of torch, other parameter types):
// then at::empty_like allocates. Skipping empty_like's two dispatcher calls took the
// allocating call's host time to 0.895x [0.885, 0.920] in one process (H200, docs/kernel.md).
decltype(&at::native::empty_cuda) empty_cuda = nullptr;
constexpr const char *kEmptyCuda =
    "_ZN2at6native10empty_cudaEN3c108ArrayRefIlEESt8optionalINS1_10ScalarTypeEES4_INS1_6Layout"
    "EES4_INS1_6DeviceEES4_IbES4_INS1_12MemoryFormatEE";

// A dense strided tensor whose sizes and strides can be read (not sparse, nested, symbolic)
// and whose memory holds its values (no negative view, whose sign the kernel cannot see).
bool plain(const at::Tensor &t) {
  return t.layout() == c10::kStrided && !t.is_nested() && !t.is_neg() &&
         !t.unsafeGetTensorImpl()->has_symbolic_sizes_strides() && (t.is_cuda() || t.is_cpu());
}

// A strong reference, released on every way out (returns and C++ exceptions alike).
struct Owned {
  PyObject *p;
  ~Owned() { Py_XDECREF(p); }
};

PyObject *attr(PyObject *obj, PyObject *name) { return PyObject_GetAttr(obj, name); }

// kernels.launch's "device is current, no launch hooks": 1 yes, 0 no, -1 error set.
int launchable(const Context &c, int64_t device) {
  Owned single{attr(c.launch_module, s_single)};
  if (!single.p) return -1;
  const int one = PyObject_IsTrue(single.p);
  if (one < 0) return -1;
  if (!one) {
    Owned current{attr(c.launch_module, s_current)};
    Owned now{current.p ? PyObject_CallNoArgs(current.p) : nullptr};
    if (!now.p) return -1;
    const long long index = PyLong_AsLongLong(now.p);
    if (index == -1 && PyErr_Occurred()) return -1;
    if (index != device) return 0;
  }
  // launch.hooks_active: a launch_enter_hook that is not None and not an empty HookChain.
  Owned knobs{attr(c.launch_module, s_knobs)};
  if (!knobs.p) return -1;
  if (knobs.p == Py_None) return 1;
  Owned hook{attr(knobs.p, s_enter)};
  if (!hook.p) return -1;
  if (hook.p == Py_None) return 1;
  Owned calls{attr(hook.p, s_calls)};
  if (!calls.p) {  // no .calls: a plain hook, which must see every launch
    PyErr_Clear();
    return 0;
  }
  return PyList_CheckExact(calls.p) && PyList_GET_SIZE(calls.p) == 0;
}

// A launch spec, (CUfunction, threads per block, shared bytes[, pdl]):
// kernels.attention.launch_spec. pdl 1: a programmatic dependent launch (cuLaunchKernelEx).
struct Spec {
  uint64_t function;
  uint32_t block_x, shared, pdl, unused;
};

// spec: a launch spec tuple -> *out, true; None -> false (launch through ``direct``); anything
// else: TypeError, -1.
int read_spec(PyObject *spec, Spec *out) {
  if (spec == Py_None) return 0;
  if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) < 3 || PyTuple_GET_SIZE(spec) > 4) {
    PyErr_SetString(PyExc_TypeError, "a launch spec is (function, block_x, shared[, pdl])");
    return -1;
  }
  out->function = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(spec, 0));
  out->block_x = (uint32_t)PyLong_AsUnsignedLong(PyTuple_GET_ITEM(spec, 1));
  out->shared = (uint32_t)PyLong_AsUnsignedLong(PyTuple_GET_ITEM(spec, 2));
  out->pdl = PyTuple_GET_SIZE(spec) == 4 ? (uint32_t)PyLong_AsUnsignedLong(PyTuple_GET_ITEM(spec, 3)) : 0;
  out->unused = 0;
  return PyErr_Occurred() ? -1 : 1;
}

// Launch through cuLaunchKernel with ``spec``, or (spec null) through the Python ``direct``.
// ptrs: kPointers data pointers; ints: kInts i32 values (< 2**31, checked by the callers).
bool launch(const Context &c, const Spec *spec, PyObject *direct, int64_t device,
            const int64_t *grid, const uint64_t *ptrs, double qk_scale, const int64_t *ints) {
  Owned stream_fn{attr(c.launch_module, s_stream)}, index{PyLong_FromLongLong(device)};
  Owned stream_obj{stream_fn.p && index.p ? PyObject_CallOneArg(stream_fn.p, index.p) : nullptr};
  if (!stream_obj.p) return false;
  const uint64_t stream = PyLong_AsUnsignedLongLong(stream_obj.p);
  if (PyErr_Occurred()) return false;
  if (!spec) {  // (grid_x, grid_y, grid_z, stream, *pointers, qk_scale, *ints)
    constexpr int n = 4 + kPointers + 1 + kInts;
    Owned args[n] = {{PyLong_FromLongLong(grid[0])}, {PyLong_FromLongLong(grid[1])},
                     {PyLong_FromLongLong(grid[2])}, {Py_NewRef(stream_obj.p)}};
    for (int i = 0; i < kPointers; ++i) args[4 + i].p = PyLong_FromUnsignedLongLong(ptrs[i]);
    args[4 + kPointers].p = PyFloat_FromDouble(qk_scale);
    for (int i = 0; i < kInts; ++i) args[5 + kPointers + i].p = PyLong_FromLongLong(ints[i]);
    PyObject *raw[n];
    for (int i = 0; i < n; ++i)
      if (!(raw[i] = args[i].p)) return false;
    Owned res{PyObject_Vectorcall(direct, raw, n, nullptr)};
    return res.p != nullptr;
  }
  if (!(spec->pdl ? (void *)cu_launch_ex : (void *)cu_launch)) {
    PyErr_SetString(PyExc_RuntimeError,
                    "ragged fastpath: libcuda's cuLaunchKernel or cuLaunchKernelEx not found");
    return false;
  }
  uint64_t p[kPointers];
  int32_t s[kInts];
  for (int i = 0; i < kPointers; ++i) p[i] = ptrs[i];
  for (int i = 0; i < kInts; ++i) s[i] = (int32_t)ints[i];
  float scale = (float)qk_scale;
  uint64_t scratch = 0;
  void *params[kPointers + 1 + kInts + 2];
  int n = 0;
  for (int i = 0; i < kPointers; ++i) params[n++] = &p[i];
  params[n++] = &scale;
  for (int i = 0; i < kInts; ++i) params[n++] = &s[i];
  params[n++] = &scratch;
  params[n++] = &scratch;
  int err;
  Py_BEGIN_ALLOW_THREADS
  if (spec->pdl) {
    LaunchAttribute attr{};
    attr.id = kProgrammaticStreamSerialization;
    attr.value.allowed = 1;
    const LaunchConfig config{(unsigned)grid[0], (unsigned)grid[1], (unsigned)grid[2],
                              spec->block_x, 1, 1, spec->shared, (void *)stream, &attr, 1};
    err = cu_launch_ex(&config, (void *)spec->function, params, nullptr);
  } else {
    err = cu_launch((void *)spec->function, (unsigned)grid[0], (unsigned)grid[1],
                    (unsigned)grid[2], spec->block_x, 1, 1, spec->shared, (void *)stream, params,
                    nullptr);
  }
  Py_END_ALLOW_THREADS
  if (err != 0) {
    const char *what = nullptr;
    if (cu_error) cu_error(err, &what);
    PyErr_Format(PyExc_RuntimeError, "cuLaunchKernel failed: %s (%d)",
                 what ? what : "unknown error", err);
    return false;
  }
  return true;
}

// Strides Triton specialized as "divisible by 16": multiples of 16 below 2**31.
bool specializable(const int64_t *v, int n) {
  int64_t bits = 0;
  for (int i = 0; i < n; ++i) bits |= v[i];
  return bits >= 0 && (bits & 15) == 0 && bits < (int64_t(1) << 31);
}

#define NONE_UNLESS(cond) \
  if (!(cond)) Py_RETURN_NONE

// The kernel's grid for max_seqlen (kernels/attention.py's grid_and_ints): num_m_blocks
// query tiles of block_m rows a sequence and head; the loop kernel: grid = (that x batch x
// heads, 1, 1) programs and its last two ints (heads, num_m_blocks); the one-tile kernel and
// specloop (grid3): grid = (num_m_blocks, heads, batch) and (total, guess_len). false where
// it overflows CUDA's grid (the checked path then decides).
bool grid_of(bool grid3, int64_t max_seqlen, int64_t block_m, int64_t batch, int64_t heads,
             int64_t total, int64_t *grid, int64_t *last_two) {
  const int64_t num_m_blocks = max_seqlen / block_m + (max_seqlen % block_m != 0);
  int64_t programs;
  if (__builtin_mul_overflow(num_m_blocks, batch, &programs) ||
      __builtin_mul_overflow(programs, heads, &programs) || programs > INT32_MAX ||
      heads > INT32_MAX)
    return false;
  if (grid3) {
    if (heads > 65535 || batch > 65535) return false;
    grid[0] = programs ? num_m_blocks : 0, grid[1] = heads, grid[2] = batch;
    // guess_len: max_seqlen for a uniform batch (total == batch x max_seqlen), else 0
    last_two[0] = total, last_two[1] = batch && total == batch * max_seqlen ? max_seqlen : 0;
  } else {
    grid[0] = programs, grid[1] = 1, grid[2] = 1;
    last_two[0] = heads, last_two[1] = num_m_blocks;
  }
  return true;
}

// The span of a ready_spans value (a tuple of (lo, hi, direct, block_m, scale, spec, pairs_lo,
// pairs_hi, grid3)) that holds max_seqlen and pairs: its index + 1, 0 for none, -1 with an
// error set.
int find_span(PyObject *spans, long long max_seqlen, long long pairs) {
  if (!PyTuple_Check(spans)) {
    PyErr_SetString(PyExc_TypeError, "a ready_spans value is a tuple of spans");
    return -1;
  }
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(spans); ++i) {
    PyObject *span = PyTuple_GET_ITEM(spans, i);
    if (!PyTuple_Check(span) || PyTuple_GET_SIZE(span) != 9) {
      PyErr_SetString(PyExc_TypeError,
                      "a span is (lo, hi, direct, block_m, scale, spec, pairs_lo, pairs_hi, grid3)");
      return -1;
    }
    const long long lo = PyLong_AsLongLong(PyTuple_GET_ITEM(span, 0));
    const long long hi = PyLong_AsLongLong(PyTuple_GET_ITEM(span, 1));
    const long long plo = PyLong_AsLongLong(PyTuple_GET_ITEM(span, 6));
    const long long phi = PyLong_AsLongLong(PyTuple_GET_ITEM(span, 7));
    if (PyErr_Occurred()) return -1;
    if (lo <= max_seqlen && max_seqlen <= hi && plo <= pairs && pairs <= phi) return (int)i + 1;
  }
  return 0;
}

// attention(*context, q, k, v, cu_seqlens, max_seqlen, softmax_scale, out)
//   -> out | a new output | None
PyObject *attention(PyObject *, PyObject *const *all_args, Py_ssize_t nargs) {
  Context c;
  if (nargs != kContext + 7) {
    PyErr_Format(PyExc_TypeError, "attention takes 10 arguments, got %zd", nargs);
    return nullptr;
  }
  if (!context(all_args, &c)) return nullptr;
  PyObject *const *args = all_args + kContext;
  PyObject *q_o = args[0], *k_o = args[1], *v_o = args[2], *cu_o = args[3];
  PyObject *max_o = args[4], *scale_o = args[5], *out_o = args[6];
  PyObject *T = c.tensor_type;
  NONE_UNLESS((PyObject *)Py_TYPE(q_o) == T && (PyObject *)Py_TYPE(k_o) == T &&
              (PyObject *)Py_TYPE(v_o) == T && (PyObject *)Py_TYPE(cu_o) == T);
  NONE_UNLESS(PyLong_CheckExact(max_o) && (scale_o == Py_None || PyFloat_CheckExact(scale_o)));
  NONE_UNLESS(out_o == Py_None || (PyObject *)Py_TYPE(out_o) == T);
  try {
    const at::Tensor &q = THPVariable_Unpack(q_o);
    const at::Tensor &k = THPVariable_Unpack(k_o);
    const at::Tensor &v = THPVariable_Unpack(v_o);
    const at::Tensor &cu = THPVariable_Unpack(cu_o);
    NONE_UNLESS(plain(q) && plain(k) && plain(v) && plain(cu));
    NONE_UNLESS(q.dim() == 3 && k.sizes() == q.sizes() && v.sizes() == q.sizes());
    const auto dtype = q.scalar_type();
    const auto device = q.device();
    NONE_UNLESS(k.scalar_type() == dtype && v.scalar_type() == dtype);
    NONE_UNLESS(k.device() == device && v.device() == device && cu.device() == device);
    NONE_UNLESS(cu.scalar_type() == at::kInt && cu.dim() == 1 && cu.size(0) >= 1 &&
                (cu.stride(0) == 1 || cu.size(0) == 1));
    int overflow = 0;
    const long long max_seqlen = PyLong_AsLongLongAndOverflow(max_o, &overflow);
    NONE_UNLESS(!overflow && max_seqlen <= q.size(0));
    const int64_t dev = q.get_device(), heads = q.size(1), head_dim = q.size(2);

    Owned ready{attr(c.kept_module, s_ready)};
    Owned key{Py_BuildValue("(LOL)", (long long)dev, (PyObject *)torch::getTHPDtype(dtype),
                            (long long)head_dim)};
    Owned spans{ready.p && key.p ? Py_XNewRef(PyDict_GetItemWithError(ready.p, key.p)) : nullptr};
    if (!spans.p) {
      if (PyErr_Occurred()) return nullptr;
      Py_RETURN_NONE;
    }
    const int64_t batch = cu.size(0) - 1;
    const int found = find_span(spans.p, max_seqlen, (long long)(batch * heads));
    if (found < 0) return nullptr;
    NONE_UNLESS(found);
    PyObject *entry = PyTuple_GET_ITEM(spans.p, found - 1);
    PyObject *direct = PyTuple_GET_ITEM(entry, 2);
    Spec spec;
    const int has_spec = read_spec(PyTuple_GET_ITEM(entry, 5), &spec);
    if (has_spec < 0) return nullptr;
    const long long block_m = PyLong_AsLongLong(PyTuple_GET_ITEM(entry, 3));
    const double default_scale = PyFloat_AsDouble(PyTuple_GET_ITEM(entry, 4));
    const int grid3 = PyObject_IsTrue(PyTuple_GET_ITEM(entry, 8));
    if (grid3 < 0) return nullptr;
    const int ok = PyErr_Occurred() ? -1 : launchable(c, dev);
    if (ok < 0) return nullptr;
    NONE_UNLESS(ok && block_m > 0);

    at::Tensor allocated;
    const at::Tensor *out;
    if (out_o == Py_None) {
      // torch.empty_like would go to a torch function mode, or to a dispatch mode that may
      // raise: leave such calls to Python.
      NONE_UNLESS(!at::impl::torch_function_mode_enabled() &&
                  !c10::impl::TorchDispatchModeTLS::any_modes_set());
      // what empty_like(q) gives where its strides are contiguous (q contiguous, or not dense:
      // a view of a packed qkv), through empty_cuda
      if (empty_cuda && q.is_cuda() && (q.is_contiguous() || !q.is_non_overlapping_and_dense()))
        allocated = empty_cuda(q.sizes(), dtype, at::kStrided, device, false,
                               at::MemoryFormat::Contiguous);
      else
        allocated = at::empty_like(q);
      out = &allocated;
    } else {
      out = &THPVariable_Unpack(out_o);
      NONE_UNLESS(plain(*out) && out->sizes() == q.sizes() && out->scalar_type() == dtype &&
                  out->device() == device);
    }
    const auto sq = q.strides(), sk = k.strides(), sv = v.strides(), so = out->strides();
    const int64_t strides[8] = {sq[0], sq[1], sk[0], sk[1], sv[0], sv[1], so[0], so[1]};
    const uint64_t ptrs[kPointers] = {
        (uint64_t)q.data_ptr(), (uint64_t)k.data_ptr(), (uint64_t)v.data_ptr(),
        (uint64_t)out->data_ptr(), (uint64_t)cu.data_ptr()};
    NONE_UNLESS(sq[2] == 1 && sk[2] == 1 && sv[2] == 1 && so[2] == 1 &&
                specializable(strides, 8) && !((ptrs[0] | ptrs[1] | ptrs[2] | ptrs[3]) & 15));
    int64_t grid[3], last_two[2];
    NONE_UNLESS(grid_of(grid3, max_seqlen, block_m, batch, heads, q.size(0), grid, last_two));
    if (grid[0]) {
      const double qk_scale =
          scale_o == Py_None ? default_scale : PyFloat_AS_DOUBLE(scale_o) * 1.4426950408889634;
      const int64_t ints[kInts] = {strides[0], strides[1], strides[2], strides[3], strides[4],
                                   strides[5], strides[6], strides[7], last_two[0], last_two[1]};
      if (!launch(c, has_spec ? &spec : nullptr, direct, dev, grid, ptrs, qk_scale, ints))
        return nullptr;
    }
    if (out_o != Py_None) return Py_NewRef(out_o);
    return THPVariable_Wrap(std::move(allocated));
  } catch (python_error &e) {  // Python code torch called raised: raise that
    e.restore();
    return nullptr;
  } catch (const std::exception &) {  // metadata that cannot be read here: Python decides
    Py_RETURN_NONE;
  }
}

// The fields of kernels.kept.KeptLaunch, by index.
enum { L_DIRECT, L_SPEC, L_KEY, L_GRID, L_KOFF, L_VOFF, L_OUT, L_OUT_PTR, L_CU_LEN, L_SCALARS,
       L_MAX_SEQLEN, L_EPOCH, L_BLOCK_M, L_SPAN, L_GRID3, L_IMAGE };

// A KeptLaunch's numbers, as ``image`` writes them into its ``image`` (bytes): what ``layout``
// reads on every call, one object where the tuple's fields are ~35 (ints, tuples, a dtype).
struct Image {
  Spec spec;
  int32_t has_spec, dtype;  // dtype: the qkv's c10::ScalarType
  int32_t grid3, unused;    // the one-tile kernel's 3-D grid (kernels.kept.KeptLaunch)
  int64_t sizes[4], strides[4], device;  // the key: the qkv the launch was kept for
  int64_t grid_x, k_offset, v_offset, cu_len, max_seqlen;
  int64_t block_m, span[2];  // another max_seqlen of the span: the grid of block_m-row tiles
  uint64_t out_ptr;
  double qk_scale;
  int64_t ints[kInts];
};

bool equal_ints(c10::IntArrayRef values, const int64_t *kept) {
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i] != kept[i]) return false;
  return true;
}

// Python ints of a tuple of n -> out; false with an error set.
bool read_ints(PyObject *seq, Py_ssize_t n, int64_t *out, const char *what) {
  if (!PyTuple_Check(seq) || PyTuple_GET_SIZE(seq) != n) {
    PyErr_Format(PyExc_TypeError, "a kept launch's %s is a tuple of %zd", what, n);
    return false;
  }
  for (Py_ssize_t i = 0; i < n; ++i) out[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(seq, i));
  return !PyErr_Occurred();
}

// image(kept) -> bytes: a KeptLaunch's numbers as an Image.
PyObject *image(PyObject *, PyObject *kept) {
  if (!PyTuple_Check(kept) || PyTuple_GET_SIZE(kept) <= L_IMAGE) {
    PyErr_SetString(PyExc_TypeError, "image takes a KeptLaunch");
    return nullptr;
  }
  PyObject *const *f = ((PyTupleObject *)kept)->ob_item;
  Image im{};
  const int has_spec = read_spec(f[L_SPEC], &im.spec);
  if (has_spec < 0) return nullptr;
  im.has_spec = has_spec;
  PyObject *key = f[L_KEY];  // (shape, strides, dtype, device index)
  if (!PyTuple_Check(key) || PyTuple_GET_SIZE(key) != 4 ||
      !THPDtype_Check(PyTuple_GET_ITEM(key, 2))) {
    PyErr_SetString(PyExc_TypeError, "a kept launch's key is (shape, strides, dtype, device)");
    return nullptr;
  }
  if (!read_ints(PyTuple_GET_ITEM(key, 0), 4, im.sizes, "shape") ||
      !read_ints(PyTuple_GET_ITEM(key, 1), 4, im.strides, "strides"))
    return nullptr;
  im.dtype = (int32_t)((THPDtype *)PyTuple_GET_ITEM(key, 2))->scalar_type;
  PyObject *scalars = f[L_SCALARS];  // (qk_scale, 10 ints)
  if (!PyTuple_Check(scalars) || PyTuple_GET_SIZE(scalars) != 1 + kInts) {
    PyErr_SetString(PyExc_TypeError, "a kept launch's scalars are (qk_scale, 10 ints)");
    return nullptr;
  }
  im.qk_scale = PyFloat_AsDouble(PyTuple_GET_ITEM(scalars, 0));
  for (int i = 0; i < kInts; ++i) im.ints[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(scalars, 1 + i));
  im.device = PyLong_AsLongLong(PyTuple_GET_ITEM(key, 3));
  im.grid_x = PyLong_AsLongLong(f[L_GRID]);
  im.k_offset = PyLong_AsLongLong(f[L_KOFF]);
  im.v_offset = PyLong_AsLongLong(f[L_VOFF]);
  im.out_ptr = PyLong_AsUnsignedLongLong(f[L_OUT_PTR]);
  im.cu_len = PyLong_AsLongLong(f[L_CU_LEN]);
  im.max_seqlen = PyLong_AsLongLong(f[L_MAX_SEQLEN]);
  im.block_m = PyLong_AsLongLong(f[L_BLOCK_M]);
  const int grid3 = PyObject_IsTrue(f[L_GRID3]);
  if (grid3 < 0) return nullptr;
  im.grid3 = grid3;
  if (PyErr_Occurred() || !read_ints(f[L_SPAN], 2, im.span, "span")) return nullptr;
  if (im.block_m <= 0) {
    PyErr_SetString(PyExc_ValueError, "a kept launch's block_m is positive");
    return nullptr;
  }
  return PyBytes_FromStringAndSize((const char *)&im, sizeof im);
}

// layout(*context, call, qkv) -> call.kept.out after launching it on qkv's data and
// call.cu_seqlens, or None (no launch kept, or this call is not of its layout).
PyObject *layout(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
  Context c;
  if (nargs != kContext + 2) {
    PyErr_SetString(PyExc_TypeError, "layout takes (*context, a LayoutAttention, qkv)");
    return nullptr;
  }
  if (!context(args, &c)) return nullptr;
  PyObject *call = args[kContext], *qkv_o = args[kContext + 1];
  Owned kept{attr(call, s_launch)};
  if (!kept.p) return nullptr;
  if (kept.p == Py_None) Py_RETURN_NONE;
  if (!PyTuple_Check(kept.p) || PyTuple_GET_SIZE(kept.p) <= L_IMAGE) {
    PyErr_SetString(PyExc_TypeError, "a LayoutAttention's kept is a KeptLaunch or None");
    return nullptr;
  }
  PyObject *const *f = ((PyTupleObject *)kept.p)->ob_item;
  if (f[L_IMAGE] == Py_None) Py_RETURN_NONE;  // kept without one: checked, and kept again
  if (!PyBytes_CheckExact(f[L_IMAGE]) || PyBytes_GET_SIZE(f[L_IMAGE]) != sizeof(Image)) {
    PyErr_SetString(PyExc_TypeError, "a kept launch's image is not this module's");
    return nullptr;
  }
  Image k;
  std::memcpy(&k, PyBytes_AS_STRING(f[L_IMAGE]), sizeof k);
  Owned cu_o{attr(call, s_cu_seqlens)}, max_o{attr(call, s_max_seqlen)};
  if (!cu_o.p || !max_o.p) return nullptr;
  PyObject *T = c.tensor_type;
  NONE_UNLESS((PyObject *)Py_TYPE(qkv_o) == T && (PyObject *)Py_TYPE(cu_o.p) == T);
  // a max_seqlen of the kept kernel's span
  NONE_UNLESS(PyLong_CheckExact(max_o.p));
  int overflow = 0;
  const long long max_seqlen = PyLong_AsLongLongAndOverflow(max_o.p, &overflow);
  if (max_seqlen == -1 && PyErr_Occurred()) return nullptr;
  NONE_UNLESS(!overflow && k.span[0] <= max_seqlen && max_seqlen <= k.span[1]);
  try {
    const at::Tensor &qkv = THPVariable_Unpack(qkv_o);
    const at::Tensor &cu = THPVariable_Unpack(cu_o.p);
    NONE_UNLESS(plain(qkv) && plain(cu));
    // the qkv the launch was kept for: shape, strides, dtype, device
    const int64_t dev = qkv.get_device();
    NONE_UNLESS(qkv.dim() == 4 && equal_ints(qkv.sizes(), k.sizes) &&
                equal_ints(qkv.strides(), k.strides) &&
                (int32_t)qkv.scalar_type() == k.dtype && dev == k.device &&
                max_seqlen <= k.sizes[0]);
    // cu_seqlens as the checked call takes it (int32, 1-D, unit stride, qkv's device), of
    // the kept length (the grid's batch)
    NONE_UNLESS(cu.scalar_type() == at::kInt && cu.dim() == 1 && cu.get_device() == dev &&
                cu.size(0) == k.cu_len && (cu.stride(0) == 1 || cu.size(0) == 1));
    const int ok = launchable(c, dev);
    if (ok < 0) return nullptr;
    NONE_UNLESS(ok);
    const uint64_t p = (uint64_t)qkv.data_ptr();
    NONE_UNLESS((p & 15) == 0);
    const uint64_t ptrs[kPointers] = {p, p + k.k_offset, p + k.v_offset, k.out_ptr,
                                      (uint64_t)cu.data_ptr()};
    // the kept grid, or the same kernel over another max_seqlen's (heads: qkv's third size)
    int64_t grid[3] = {k.grid_x, k.grid3 ? k.sizes[2] : 1, k.grid3 ? k.cu_len - 1 : 1};
    if (max_seqlen != k.max_seqlen)
      NONE_UNLESS(grid_of(k.grid3, max_seqlen, k.block_m, k.cu_len - 1, k.sizes[2], k.sizes[0],
                          grid, &k.ints[kInts - 2]));
    if (grid[0] && !launch(c, k.has_spec ? &k.spec : nullptr, f[L_DIRECT], dev, grid, ptrs,
                           k.qk_scale, k.ints))
      return nullptr;
    return Py_NewRef(f[L_OUT]);
  } catch (python_error &e) {
    e.restore();
    return nullptr;
  } catch (const std::exception &) {
    Py_RETURN_NONE;
  }
}

PyMethodDef methods[] = {
    {"attention", (PyCFunction)(void (*)(void))attention, METH_FASTCALL,
     "varlen_attention(..., validate=False) with the triton backend, or None"},
    {"layout", (PyCFunction)(void (*)(void))layout, METH_FASTCALL,
     "a LayoutAttention's kept launch on qkv and its cu_seqlens, or None"},
    {"image", image, METH_O, "a KeptLaunch's numbers as the bytes layout reads"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "ragged_fastpath", nullptr, -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit_ragged_fastpath(void) {
  const char *names[] = {"ready_spans", "SINGLE_DEVICE",  "current_device",
                         "raw_stream",  "_runtime_knobs", "launch_enter_hook",
                         "calls",       "kept",           "cu_seqlens",
                         "max_seqlen"};
  PyObject **slots[] = {&s_ready, &s_single, &s_current, &s_stream,       &s_knobs,
                        &s_enter, &s_calls,  &s_launch,  &s_cu_seqlens, &s_max_seqlen};
  for (int i = 0; i < 10; ++i)
    if (!(*slots[i] = PyUnicode_InternFromString(names[i]))) return nullptr;
  // torch's CUDA library, where this torch loaded one (never opened here: RTLD_NOLOAD)
  if (void *torch_cuda = dlopen("libtorch_cuda.so", RTLD_NOW | RTLD_NOLOAD))
    empty_cuda = (decltype(empty_cuda))dlsym(torch_cuda, kEmptyCuda);
  // libcuda, when this process has one (never on a machine without a GPU driver).
  if (void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL)) {
    cu_launch = (LaunchFn)dlsym(cuda, "cuLaunchKernel");
    cu_launch_ex = (LaunchExFn)dlsym(cuda, "cuLaunchKernelEx");
    cu_error = (ErrorFn)dlsym(cuda, "cuGetErrorString");
  }
  return PyModule_Create(&module_def);
}
