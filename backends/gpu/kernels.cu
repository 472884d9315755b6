// Kernels of attnrun's GPU backend. The backend embeds this file and
// compiles it with NVRTC when it starts (no CUDA toolkit at build time).
//
// ABI: every kernel takes exactly one struct by value, and every member of
// every struct is 8 bytes wide (pointers as u64, integers as i64, floating
// point parameters as double), so the Go side lays a struct out as a []uint64
// with member i at byte 8*i (see params.go; abi_test.go checks the offsets
// with static_assert through g++).
//
// NVRTC compiles without system headers: only builtins are used (expf, erff,
// sqrtf, powf, __int_as_float, __shfl_xor_sync, atomicExch, ...).

#define MAXR 16

typedef long long i64;
typedef unsigned long long u64;
typedef unsigned char u8;

#define F_INF __int_as_float(0x7f800000)
#define F_NEGINF __int_as_float((int)0xff800000)
#define F_NAN __int_as_float(0x7fffffff)

// Element type codes: ONNX TensorProto.DataType numbers.
#define DT_F32 1
#define DT_U8 2
#define DT_I32 6
#define DT_I64 7
#define DT_BOOL 9
#define DT_F64 11

// Binary op codes (params.go: binOp*). Codes >= OP_EQ write bool (u8).
#define OP_ADD 0
#define OP_SUB 1
#define OP_MUL 2
#define OP_DIV 3
#define OP_POW 4
#define OP_AND 5
#define OP_OR 6
#define OP_XOR 7
#define OP_EQ 10
#define OP_LT 11
#define OP_GT 12
#define OP_LE 13
#define OP_GE 14

// Unary op codes (params.go: unOp*).
#define UN_SQRT 0
#define UN_ERF 1
#define UN_NEG 2
#define UN_EXP 3
#define UN_TANH 4
#define UN_RELU 5
#define UN_ABS 6
#define UN_RECIP 7
#define UN_SIGMOID 8
#define UN_LOG 9
#define UN_NOT 10

// Mask kinds of the attention kernel (params.go: mask*).
#define MASK_NONE 0
#define MASK_BOOL_TRUE 1
#define MASK_BOOL_FALSE 2
#define MASK_ADD 3

// What attention_f32 writes to its scores output (params.go: scores*).
#define SC_NONE 0
#define SC_RAW 1
#define SC_SOFTCAPPED 2
#define SC_BIASED 3
#define SC_WEIGHTS 4

// Attention tiling: AT_WARPS warps of AT_ROWS query rows each per block,
// AT_BK keys per shared-memory tile (one key per lane), head sizes up to
// AT_MAXD (the accumulator holds AT_MAXD/32 columns per lane).
#define AT_WARPS 4
#define AT_ROWS 4
#define AT_BK 32
#define AT_MAXD 128
#define AT_DVPL (AT_MAXD / 32)

#define GRID_LOOP(i, n) for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (i64)gridDim.x * blockDim.x)

// ---- parameter structs ----

struct PBinary {
  i64 op, n;
  u64 out, a, b;
  i64 rank;
  i64 shape[MAXR], sa[MAXR], sb[MAXR];
};

struct PUnary {
  i64 op, n;
  u64 out, in;
};

struct PCast {
  i64 n, from, to;
  u64 out, in;
};

struct PWhere {
  i64 n;
  u64 out, cond, x, y;
  i64 rank;
  i64 shape[MAXR], sc[MAXR], sx[MAXR], sy[MAXR];
};

struct PCopy {
  i64 n;
  u64 out, in;
  i64 rank;
  i64 shape[MAXR], sin[MAXR], sout[MAXR];
};

struct PGather {
  i64 n;
  u64 out, data, idx;
  i64 idx64, outer, axis, nidx, inner;
  u64 err;
};

struct PFill {
  i64 n;
  u64 out, bits;
};

struct PSoftmax {
  u64 out, in;
  i64 rows, axis, inner;
};

struct PLayerNorm {
  u64 out, in, scale, bias, mean, invstd;
  i64 rows, cols, scale_n, bias_n;
  double eps;
};

struct PAttn {
  u64 out, q, k, v, mask;
  i64 sq, sk, d, dv, mask_kind, m_row, m_col, batches;
  // element strides inside one matrix: Q rows/cols, K keys/dims, V keys/
  // cols, output rows/cols (strided views of the tensors' data).
  i64 q_rs, q_cs, k_js, k_cs, v_js, v_cs, o_rs, o_cs;
  double scale, fill, mask_scale;
  i64 rank;
  i64 bshape[MAXR], bq[MAXR], bk[MAXR], bv[MAXR], bm[MAXR], bo[MAXR];
  // ONNX Attention's extras (ops/attention.go): softcap c > 0 makes each
  // score c·tanh(s/c); with causal, key j is -inf for row i when
  // j > i + causal_off; keys at or past mask_keys are -inf (a padded
  // mask); kvlen (int64, null: none) gives each batch matrix's key count,
  // indexed through the bl strides; scores (null: none) receives the
  // [batches, sq, sk] scores at stage scores_mode.
  double softcap;
  i64 causal, causal_off, mask_keys, scores_mode;
  u64 kvlen, scores;
  i64 bl[MAXR];
};

struct PRMSNorm {
  u64 out, in, scale;
  i64 rows, cols, period;
  double eps;
};

struct PRotary {
  u64 out, in, cos, sin, pos, err;
  i64 n, s, h, d, rd, b_str, s_str, h_str, interleaved, cache_rows;
};

struct PTrilu {
  i64 n, rows, cols, k, upper;
  u64 out, in;
};

// ---- helpers ----

// Offsets of linear element i of a row-major shape in up to three strided
// operands.
__device__ __forceinline__ void offsets3(i64 i, i64 rank, const i64* shape, const i64* s0, const i64* s1,
                                         const i64* s2, i64& o0, i64& o1, i64& o2) {
  o0 = 0;
  o1 = 0;
  o2 = 0;
  for (i64 d = rank - 1; d >= 0; --d) {
    i64 c = i % shape[d];
    i /= shape[d];
    o0 += c * s0[d];
    o1 += c * s1[d];
    if (s2) o2 += c * s2[d];
  }
}

template <class T>
__device__ __forceinline__ T arith(i64 op, T a, T b) {
  switch (op) {
    case OP_ADD: return a + b;
    case OP_SUB: return a - b;
    case OP_MUL: return a * b;
    case OP_DIV: return b == (T)0 ? (T)0 : (T)(a / b);  // integer types: C truncation; 0 for x/0
  }
  return (T)0;
}

template <>
__device__ __forceinline__ float arith<float>(i64 op, float a, float b) {
  switch (op) {
    case OP_ADD: return a + b;
    case OP_SUB: return a - b;
    case OP_MUL: return a * b;
    case OP_DIV: return a / b;
    case OP_POW: return powf(a, b);
  }
  return 0.f;
}

// bool: Add is logical or (PyTorch's meaning of bool + bool), Mul is and.
template <>
__device__ __forceinline__ u8 arith<u8>(i64 op, u8 a, u8 b) {
  switch (op) {
    case OP_ADD:
    case OP_OR: return (u8)((a != 0) | (b != 0));
    case OP_MUL:
    case OP_AND: return (u8)((a != 0) & (b != 0));
    case OP_XOR: return (u8)((a != 0) ^ (b != 0));
  }
  return 0;
}

template <class T>
__device__ __forceinline__ u8 compare(i64 op, T a, T b) {
  switch (op) {
    case OP_EQ: return a == b;
    case OP_LT: return a < b;
    case OP_GT: return a > b;
    case OP_LE: return a <= b;
    case OP_GE: return a >= b;
  }
  return 0;
}

template <class T>
__device__ void binary_body(const PBinary& p) {
  const T* A = (const T*)p.a;
  const T* B = (const T*)p.b;
  GRID_LOOP(i, p.n) {
    i64 oa, ob, unused;
    offsets3(i, p.rank, p.shape, p.sa, p.sb, 0, oa, ob, unused);
    if (p.op >= OP_EQ) {
      ((u8*)p.out)[i] = compare<T>(p.op, A[oa], B[ob]);
    } else {
      ((T*)p.out)[i] = arith<T>(p.op, A[oa], B[ob]);
    }
  }
}

// Sum or max over the block (blockDim.x a multiple of 32, at most 1024);
// every thread gets the result. red holds 32 floats of shared memory.
__device__ float block_reduce(float v, bool is_max, float* red) {
  for (int o = 16; o > 0; o >>= 1) {
    float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = is_max ? fmaxf(v, w) : v + w;
  }
  int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  v = lane < nw ? red[lane] : (is_max ? F_NEGINF : 0.f);
  for (int o = 16; o > 0; o >>= 1) {
    float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = is_max ? fmaxf(v, w) : v + w;
  }
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// ---- elementwise ----

extern "C" __global__ void binary_f32(const PBinary p) { binary_body<float>(p); }
extern "C" __global__ void binary_i64(const PBinary p) { binary_body<i64>(p); }
extern "C" __global__ void binary_i32(const PBinary p) { binary_body<int>(p); }
extern "C" __global__ void binary_u8(const PBinary p) { binary_body<u8>(p); }

extern "C" __global__ void unary_f32(const PUnary p) {
  const float* x = (const float*)p.in;
  float* y = (float*)p.out;
  GRID_LOOP(i, p.n) {
    float v = x[i], r = 0.f;
    switch (p.op) {
      case UN_SQRT: r = sqrtf(v); break;
      case UN_ERF: r = erff(v); break;
      case UN_NEG: r = -v; break;
      case UN_EXP: r = expf(v); break;
      case UN_TANH: r = tanhf(v); break;
      case UN_RELU: r = v > 0.f ? v : 0.f; break;
      case UN_ABS: r = fabsf(v); break;
      case UN_RECIP: r = 1.f / v; break;
      case UN_SIGMOID: r = 1.f / (1.f + expf(-v)); break;
      case UN_LOG: r = logf(v); break;
    }
    y[i] = r;
  }
}

extern "C" __global__ void unary_i64(const PUnary p) {
  const i64* x = (const i64*)p.in;
  i64* y = (i64*)p.out;
  GRID_LOOP(i, p.n) {
    i64 v = x[i];
    y[i] = p.op == UN_NEG ? -v : (p.op == UN_ABS ? (v < 0 ? -v : v) : (p.op == UN_RELU ? (v > 0 ? v : 0) : v));
  }
}

extern "C" __global__ void unary_u8(const PUnary p) {
  const u8* x = (const u8*)p.in;
  u8* y = (u8*)p.out;
  GRID_LOOP(i, p.n) { y[i] = p.op == UN_NOT ? (u8)(x[i] == 0) : x[i]; }
}

__device__ __forceinline__ bool is_int_code(i64 dt) { return dt == DT_I64 || dt == DT_I32 || dt == DT_U8 || dt == DT_BOOL; }

extern "C" __global__ void cast_any(const PCast p) {
  GRID_LOOP(i, p.n) {
    double f = 0;
    i64 n = 0;
    switch (p.from) {
      case DT_F32: f = ((const float*)p.in)[i]; break;
      case DT_F64: f = ((const double*)p.in)[i]; break;
      case DT_I64: n = ((const i64*)p.in)[i]; break;
      case DT_I32: n = ((const int*)p.in)[i]; break;
      case DT_U8:
      case DT_BOOL: n = ((const u8*)p.in)[i]; break;
    }
    bool fromInt = is_int_code(p.from);
    if (!fromInt) n = (i64)f;  // truncation toward zero, as ONNX Cast
    if (fromInt) f = (double)n;
    switch (p.to) {
      case DT_F32: ((float*)p.out)[i] = (float)f; break;
      case DT_F64: ((double*)p.out)[i] = f; break;
      case DT_I64: ((i64*)p.out)[i] = n; break;
      case DT_I32: ((int*)p.out)[i] = (int)n; break;
      case DT_U8: ((u8*)p.out)[i] = (u8)n; break;
      case DT_BOOL: ((u8*)p.out)[i] = fromInt ? (u8)(n != 0) : (u8)(f != 0); break;
    }
  }
}

template <class T>
__device__ void where_body(const PWhere& p) {
  const u8* C = (const u8*)p.cond;
  const T* X = (const T*)p.x;
  const T* Y = (const T*)p.y;
  GRID_LOOP(i, p.n) {
    i64 oc, ox, oy;
    offsets3(i, p.rank, p.shape, p.sc, p.sx, p.sy, oc, ox, oy);
    ((T*)p.out)[i] = C[oc] ? X[ox] : Y[oy];
  }
}

extern "C" __global__ void where_1(const PWhere p) { where_body<u8>(p); }
extern "C" __global__ void where_4(const PWhere p) { where_body<unsigned int>(p); }
extern "C" __global__ void where_8(const PWhere p) { where_body<u64>(p); }

// ---- data movement ----

// Strided copy: element i of the iteration shape goes from in[sum c*sin] to
// out[sum c*sout]. Transpose, Expand, Slice, Concat, Split, Tile and Gemm's
// bias broadcast are all this kernel with different strides and offsets.
template <class T>
__device__ void copy_body(const PCopy& p) {
  const T* X = (const T*)p.in;
  T* Y = (T*)p.out;
  GRID_LOOP(i, p.n) {
    i64 oi, oo, unused;
    offsets3(i, p.rank, p.shape, p.sin, p.sout, 0, oi, oo, unused);
    Y[oo] = X[oi];
  }
}

extern "C" __global__ void copy_1(const PCopy p) { copy_body<u8>(p); }
extern "C" __global__ void copy_4(const PCopy p) { copy_body<unsigned int>(p); }
extern "C" __global__ void copy_8(const PCopy p) { copy_body<u64>(p); }

// Gather along an axis: out[o, k, j] = data[o, idx[k], j]. An index out of
// [-axis, axis) writes 0 and sets *err (the host checks it after the run).
template <class T>
__device__ void gather_body(const PGather& p) {
  const T* X = (const T*)p.data;
  T* Y = (T*)p.out;
  GRID_LOOP(i, p.n) {
    i64 j = i % p.inner, t = i / p.inner;
    i64 k = t % p.nidx, o = t / p.nidx;
    i64 ix = p.idx64 ? ((const i64*)p.idx)[k] : (i64)((const int*)p.idx)[k];
    if (ix < 0) ix += p.axis;
    if (ix < 0 || ix >= p.axis) {
      Y[i] = (T)0;
      atomicExch((unsigned int*)p.err, 1u);
      continue;
    }
    Y[i] = X[(o * p.axis + ix) * p.inner + j];
  }
}

extern "C" __global__ void gather_1(const PGather p) { gather_body<u8>(p); }
extern "C" __global__ void gather_4(const PGather p) { gather_body<unsigned int>(p); }
extern "C" __global__ void gather_8(const PGather p) { gather_body<u64>(p); }

extern "C" __global__ void fill_1(const PFill p) { GRID_LOOP(i, p.n)((u8*)p.out)[i] = (u8)p.bits; }
extern "C" __global__ void fill_4(const PFill p) { GRID_LOOP(i, p.n)((unsigned int*)p.out)[i] = (unsigned int)p.bits; }
extern "C" __global__ void fill_8(const PFill p) { GRID_LOOP(i, p.n)((u64*)p.out)[i] = p.bits; }

// Trilu over the last two axes: keep x[i][j] when j - i >= k (upper) or
// j - i <= k (lower), else 0.
template <class T>
__device__ void trilu_body(const PTrilu& p) {
  GRID_LOOP(i, p.n) {
    i64 j = i % p.cols, r = (i / p.cols) % p.rows;
    bool keep = p.upper ? (j - r >= p.k) : (j - r <= p.k);
    ((T*)p.out)[i] = keep ? ((const T*)p.in)[i] : (T)0;
  }
}

extern "C" __global__ void trilu_1(const PTrilu p) { trilu_body<u8>(p); }
extern "C" __global__ void trilu_4(const PTrilu p) { trilu_body<unsigned int>(p); }
extern "C" __global__ void trilu_8(const PTrilu p) { trilu_body<u64>(p); }

// ---- normalization ----

// Softmax over one axis: rows = outer*inner rows of axis elements spaced
// inner apart. One block per row. A row of all -inf gives NaN, as ONNX.
extern "C" __global__ void softmax_f32(const PSoftmax p) {
  __shared__ float red[32];
  for (i64 r = blockIdx.x; r < p.rows; r += gridDim.x) {
    i64 base = (r / p.inner) * p.axis * p.inner + r % p.inner;
    const float* x = (const float*)p.in + base;
    float* y = (float*)p.out + base;
    float m = F_NEGINF;
    for (i64 j = threadIdx.x; j < p.axis; j += blockDim.x) m = fmaxf(m, x[j * p.inner]);
    m = block_reduce(m, true, red);
    float s = 0.f;
    for (i64 j = threadIdx.x; j < p.axis; j += blockDim.x) s += expf(x[j * p.inner] - m);
    s = block_reduce(s, false, red);
    float inv = 1.f / s;
    for (i64 j = threadIdx.x; j < p.axis; j += blockDim.x) y[j * p.inner] = expf(x[j * p.inner] - m) * inv;
  }
}

// LayerNormalization over the last cols elements of each row: two passes
// (mean, then variance of the centered values), fp32. scale and bias hold
// scale_n / bias_n elements (1 or cols); bias, mean and invstd may be 0.
extern "C" __global__ void layernorm_f32(const PLayerNorm p) {
  __shared__ float red[32];
  const float* S = (const float*)p.scale;
  const float* Bi = (const float*)p.bias;
  for (i64 r = blockIdx.x; r < p.rows; r += gridDim.x) {
    const float* x = (const float*)p.in + r * p.cols;
    float* y = (float*)p.out + r * p.cols;
    float s = 0.f;
    for (i64 j = threadIdx.x; j < p.cols; j += blockDim.x) s += x[j];
    float mean = block_reduce(s, false, red) / (float)p.cols;
    float v = 0.f;
    for (i64 j = threadIdx.x; j < p.cols; j += blockDim.x) {
      float d = x[j] - mean;
      v += d * d;
    }
    float var = block_reduce(v, false, red) / (float)p.cols;
    float inv = 1.f / sqrtf(var + (float)p.eps);
    for (i64 j = threadIdx.x; j < p.cols; j += blockDim.x) {
      float o = (x[j] - mean) * inv * S[p.scale_n == 1 ? 0 : j];
      if (Bi) o += Bi[p.bias_n == 1 ? 0 : j];
      y[j] = o;
    }
    if (threadIdx.x == 0) {
      if (p.mean) ((float*)p.mean)[r] = mean;
      if (p.invstd) ((float*)p.invstd)[r] = inv;
    }
  }
}

// RMSNormalization over rows of cols elements, one block per row: y =
// x / sqrt(mean(x²) + eps) · scale, fp32. The scale is read at
// (r·cols + j) mod period: the host expands it over X's trailing dims it
// covers, a multiple of cols.
extern "C" __global__ void rmsnorm_f32(const PRMSNorm p) {
  __shared__ float red[32];
  for (i64 r = blockIdx.x; r < p.rows; r += gridDim.x) {
    const float* x = (const float*)p.in + r * p.cols;
    float* y = (float*)p.out + r * p.cols;
    const float* sc = (const float*)p.scale + (r * p.cols) % p.period;
    float ss = 0.f;
    for (i64 j = threadIdx.x; j < p.cols; j += blockDim.x) ss += x[j] * x[j];
    const float inv = 1.f / sqrtf(block_reduce(ss, false, red) / (float)p.cols + (float)p.eps);
    for (i64 j = threadIdx.x; j < p.cols; j += blockDim.x) y[j] = x[j] * inv * sc[j];
  }
}

// RotaryEmbedding, one thread per element of X seen as [B, S, H, D] (n
// elements; X's element (b, s, h, j) at b·b_str + s·s_str + h·h_str + j).
// The first rd elements of each head vector rotate by the (cos, sin) of
// their pair (halves, or neighbours when interleaved); the rest copy. The
// cache row is position_ids[b, s] (pos) or b·S + s without them; a
// position outside [0, cache_rows) writes 0 and sets *err.
extern "C" __global__ void rotary_f32(const PRotary p) {
  const float* X = (const float*)p.in;
  float* Y = (float*)p.out;
  const i64 half = p.rd / 2;
  GRID_LOOP(i, p.n) {
    const i64 j = i % p.d, v = i / p.d;
    const i64 hh = v % p.h, t = v / p.h;
    const i64 ss = t % p.s, bb = t / p.s;
    const i64 off = bb * p.b_str + ss * p.s_str + hh * p.h_str;
    if (j >= p.rd) {
      Y[off + j] = X[off + j];
      continue;
    }
    i64 row = bb * p.s + ss;
    if (p.pos) {
      row = ((const i64*)p.pos)[bb * p.s + ss];
      if (row < 0 || row >= p.cache_rows) {
        Y[off + j] = 0.f;
        atomicExch((unsigned int*)p.err, 1u);
        continue;
      }
    }
    const i64 k = p.interleaved ? j / 2 : (j < half ? j : j - half);
    const bool first = p.interleaved ? (j % 2 == 0) : (j < half);
    const i64 j1 = p.interleaved ? 2 * k : k, j2 = p.interleaved ? 2 * k + 1 : k + half;
    const float c = ((const float*)p.cos)[row * half + k], sn = ((const float*)p.sin)[row * half + k];
    const float x1 = X[off + j1], x2 = X[off + j2];
    Y[off + j] = first ? c * x1 - sn * x2 : sn * x1 + c * x2;
  }
}

// ---- fused attention ----

// softmax(scale·Q·Kᵀ masked)·V without materializing the scores
// (FlashAttention-style, CUDA cores, fp32 throughout). Block (x, y) handles
// AT_WARPS*AT_ROWS query rows of batch matrix y; each warp owns AT_ROWS
// rows and keeps their running max m, sum l and accumulator (AT_DVPL
// columns per lane) in registers. K/V tiles of AT_BK keys are staged in
// shared memory (K rows padded to D+1 floats against bank conflicts); lane j
// computes the score of key j, the warp reduces max and sum with shuffles,
// and P·V reads the tile's probabilities from shared memory.
//
// Q, K, V and the output are read and written through strided views
// (ops/attention.go's q_view, k_view, v_view, out_view; k_transposed is a
// view too): per-batch offsets from the b* strides, element strides inside
// a matrix from the *_rs/_cs/_js fields. The host adds each view's offset
// to the pointer.
//
// Grouped-query heads need no support here: the host splits the heads
// axis of the batch into (kv heads, group) with K and V broadcast along
// the group. Softcap, the causal offset, padded masks, key lengths and the
// scores output follow ops/attention.go (see PAttn); for the "weights"
// stage each lane rewrites the scores it wrote once the row's max and sum
// are final.
//
// Semantics follow ops/attention.go: a row whose scores are all -inf gives
// NaN, a row masked with a finite fill gets uniform weights, Sk = 0 is
// handled by the host (zeros). Dynamic shared memory:
// 4*(AT_BK*(D+1) + AT_BK*DV + AT_WARPS*AT_ROWS*D + AT_WARPS*AT_BK) bytes.
extern "C" __global__ void attention_f32(const PAttn p) {
  extern __shared__ float sh[];
  const int D = (int)p.d, DV = (int)p.dv, ldk = D + 1;
  float* Ks = sh;
  float* Vs = Ks + AT_BK * ldk;
  float* Qs = Vs + AT_BK * DV;
  float* Ps = Qs + AT_WARPS * AT_ROWS * D;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const float scale = (float)p.scale, fill = (float)p.fill, mscale = (float)p.mask_scale;
  const float softcap = (float)p.softcap;
  for (i64 b = blockIdx.y; b < p.batches; b += gridDim.y) {
    i64 qo = 0, ko = 0, vo = 0, mo = 0, oo = 0, lo = 0, rem = b;
    for (i64 d = p.rank - 1; d >= 0; --d) {
      i64 c = rem % p.bshape[d];
      rem /= p.bshape[d];
      qo += c * p.bq[d];
      ko += c * p.bk[d];
      vo += c * p.bv[d];
      mo += c * p.bm[d];
      oo += c * p.bo[d];
      lo += c * p.bl[d];
    }
    i64 klim = p.sk;  // keys past klim are -inf (key lengths)
    if (p.kvlen) {
      const i64 n = ((const i64*)p.kvlen)[lo];
      klim = n < 0 ? 0 : (n < p.sk ? n : p.sk);
    }
    float* SC = p.scores ? (float*)p.scores + b * p.sq * p.sk : (float*)0;
    const float* Q = (const float*)p.q + qo;
    const float* K = (const float*)p.k + ko;
    const float* V = (const float*)p.v + vo;
    const i64 row0 = (i64)blockIdx.x * (AT_WARPS * AT_ROWS) + warp * AT_ROWS;
    __syncthreads();  // the previous batch's tiles and rows are consumed
    for (int r = 0; r < AT_ROWS; r++) {
      i64 row = row0 + r;
      for (int c = lane; c < D; c += 32) Qs[(warp * AT_ROWS + r) * D + c] = row < p.sq ? Q[row * p.q_rs + c * p.q_cs] : 0.f;
    }
    float m[AT_ROWS], l[AT_ROWS], acc[AT_ROWS][AT_DVPL];
#pragma unroll
    for (int r = 0; r < AT_ROWS; r++) {
      m[r] = F_NEGINF;
      l[r] = 0.f;
#pragma unroll
      for (int t = 0; t < AT_DVPL; t++) acc[r][t] = 0.f;
    }
    for (i64 j0 = 0; j0 < p.sk; j0 += AT_BK) {
      const int cols = (int)(p.sk - j0 < AT_BK ? p.sk - j0 : AT_BK);
      __syncthreads();  // the previous tile is consumed
      for (int t = threadIdx.x; t < AT_BK * D; t += blockDim.x) {
        int j = t / D, c = t % D;
        float val = 0.f;
        if (j < cols) val = K[(j0 + j) * p.k_js + c * p.k_cs];
        Ks[j * ldk + c] = val;
      }
      for (int t = threadIdx.x; t < AT_BK * DV; t += blockDim.x) {
        int j = t / DV, c = t % DV;
        Vs[t] = j < cols ? V[(j0 + j) * p.v_js + c * p.v_cs] : 0.f;
      }
      __syncthreads();
#pragma unroll
      for (int r = 0; r < AT_ROWS; r++) {
        const i64 row = row0 + r;
        if (row >= p.sq) break;  // uniform across the warp
        const float* q = Qs + (warp * AT_ROWS + r) * D;
        const bool valid = lane < cols;
        float s = F_NEGINF;
        if (valid) {
          const i64 j = j0 + lane;
          float dot = 0.f;
          for (int c = 0; c < D; c++) dot += q[c] * Ks[lane * ldk + c];
          s = dot * scale;
          if (p.scores_mode == SC_RAW) SC[row * p.sk + j] = s;
          if (softcap > 0.f) s = softcap * tanhf(s / softcap);
          if (p.scores_mode == SC_SOFTCAPPED) SC[row * p.sk + j] = s;
          if (p.mask_kind != MASK_NONE) {
            i64 mi = mo + row * p.m_row + j * p.m_col;
            if (j >= p.mask_keys) {
              s = F_NEGINF;
            } else if (p.mask_kind == MASK_ADD) {
              s += ((const float*)p.mask)[mi] * mscale;
            } else {
              bool set = ((const u8*)p.mask)[mi] != 0;
              if (set == (p.mask_kind == MASK_BOOL_TRUE)) s = fill;
            }
          }
          if (j >= klim || (p.causal && j > row + p.causal_off)) s = F_NEGINF;
          if (p.scores_mode >= SC_BIASED) SC[row * p.sk + j] = s;
        }
        const float mnew = fmaxf(m[r], warp_max(valid ? s : F_NEGINF));
        if (mnew == F_NEGINF) continue;  // every score so far is -inf (uniform)
        const float pj = valid ? expf(s - mnew) : 0.f;
        const float corr = expf(m[r] - mnew);  // 0 while m is -inf
        l[r] = l[r] * corr + warp_sum(pj);
        m[r] = mnew;
        Ps[warp * AT_BK + lane] = pj;
        __syncwarp();
#pragma unroll
        for (int t = 0; t < AT_DVPL; t++) {
          const int c = lane + 32 * t;
          if (c < DV) {
            float a = acc[r][t] * corr;
            for (int j = 0; j < cols; j++) a += Ps[warp * AT_BK + j] * Vs[j * DV + c];
            acc[r][t] = a;
          }
        }
        __syncwarp();
      }
    }
    if (p.scores_mode == SC_WEIGHTS) {
      // Each lane wrote keys lane, lane+32, ...: it normalizes them.
#pragma unroll
      for (int r = 0; r < AT_ROWS; r++) {
        const i64 row = row0 + r;
        if (row >= p.sq) break;
        float* sr = SC + row * p.sk;
        for (i64 j = lane; j < p.sk; j += 32) sr[j] = m[r] == F_NEGINF ? F_NAN : expf(sr[j] - m[r]) / l[r];
      }
    }
    float* O = (float*)p.out + oo;
#pragma unroll
    for (int r = 0; r < AT_ROWS; r++) {
      const i64 row = row0 + r;
      if (row >= p.sq) break;
#pragma unroll
      for (int t = 0; t < AT_DVPL; t++) {
        const int c = lane + 32 * t;
        if (c < DV) O[row * p.o_rs + c * p.o_cs] = m[r] == F_NEGINF ? F_NAN : acc[r][t] / l[r];
      }
    }
  }
}
