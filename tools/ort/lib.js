'use strict';
// Shared helpers for the ONNX Runtime peer tools: .npy read/write, ONNX
// TensorProto (.pb) decoding, a minimal ModelProto reader (graph inputs and
// outputs with their declared shapes), a seeded PRNG for random inputs, and
// output comparison. No dependency besides Node itself.

const fs = require('fs');
const path = require('path');

// ---------------------------------------------------------------- dtypes

// ORT tensor type name -> {npy descr, typed array, bytes per element, onnx}.
const DTYPES = {
  float32: { descr: '<f4', Arr: Float32Array, size: 4, onnx: 1 },
  float64: { descr: '<f8', Arr: Float64Array, size: 8, onnx: 11 },
  int64: { descr: '<i8', Arr: BigInt64Array, size: 8, onnx: 7 },
  int32: { descr: '<i4', Arr: Int32Array, size: 4, onnx: 6 },
  bool: { descr: '|b1', Arr: Uint8Array, size: 1, onnx: 9 },
  uint8: { descr: '|u1', Arr: Uint8Array, size: 1, onnx: 2 },
  int8: { descr: '|i1', Arr: Int8Array, size: 1, onnx: 3 },
};

const NPY_DESCR = {};
for (const [name, d] of Object.entries(DTYPES)) NPY_DESCR[d.descr] = name;
// numpy writes these equivalent spellings for one-byte types.
NPY_DESCR['<b1'] = 'bool';
NPY_DESCR['<u1'] = 'uint8';
NPY_DESCR['<i1'] = 'int8';

const ONNX_DTYPE = {};
for (const [name, d] of Object.entries(DTYPES)) ONNX_DTYPE[d.onnx] = name;

const ONNX_TYPE_NAMES = {
  0: 'undefined', 1: 'float32', 2: 'uint8', 3: 'int8', 4: 'uint16', 5: 'int16', 6: 'int32', 7: 'int64',
  8: 'string', 9: 'bool', 10: 'float16', 11: 'float64', 12: 'uint32', 13: 'uint64', 16: 'bfloat16',
};

// Upper bound on the elements of a tensor read from a file (4 GiB of floats).
const MAX_ELEMENTS = 1 << 30;

function numElements(dims) {
  let n = 1;
  for (const d of dims) {
    if (!Number.isSafeInteger(d) || d < 0) throw new Error(`bad dimension ${d} in shape [${dims}]`);
    n *= d;
  }
  if (n > MAX_ELEMENTS) throw new Error(`shape [${dims}] has ${n} elements, more than the limit ${MAX_ELEMENTS}`);
  return n;
}

// Copies `bytes` (a Buffer slice) into a fresh, aligned typed array.
function typedFromBytes(type, bytes, n) {
  const d = DTYPES[type];
  if (bytes.length !== n * d.size) {
    throw new Error(`${type} data has ${bytes.length} bytes, want ${n * d.size} for ${n} elements`);
  }
  const out = new d.Arr(n);
  new Uint8Array(out.buffer).set(bytes);
  return out;
}

// A plain tensor: {type (ORT type name), dims (numbers), data (typed array)}.
function makeTensor(type, dims, data) {
  return { type, dims: dims.map(Number), data };
}

// ---------------------------------------------------------------- .npy

function readNpy(file) {
  const buf = fs.readFileSync(file);
  if (buf.length < 10 || buf.readUInt8(0) !== 0x93 || buf.toString('latin1', 1, 6) !== 'NUMPY') {
    throw new Error(`${file}: not a .npy file`);
  }
  const major = buf.readUInt8(6);
  let hlen, hstart;
  if (major === 1) {
    hlen = buf.readUInt16LE(8);
    hstart = 10;
  } else if (major === 2 || major === 3) {
    hlen = buf.readUInt32LE(8);
    hstart = 12;
  } else {
    throw new Error(`${file}: unsupported .npy version ${major}`);
  }
  if (hstart + hlen > buf.length) throw new Error(`${file}: truncated header`);
  const header = buf.toString('latin1', hstart, hstart + hlen);
  const descr = /'descr'\s*:\s*'([^']*)'/.exec(header);
  const fortran = /'fortran_order'\s*:\s*(True|False)/.exec(header);
  const shape = /'shape'\s*:\s*\(([^)]*)\)/.exec(header);
  if (!descr || !fortran || !shape) throw new Error(`${file}: cannot parse header ${JSON.stringify(header)}`);
  if (fortran[1] === 'True') throw new Error(`${file}: Fortran-order arrays are not supported`);
  const type = NPY_DESCR[descr[1]];
  if (!type) throw new Error(`${file}: unsupported dtype ${descr[1]} (want <f4 <f8 <i8 <i4 |b1 |u1 |i1)`);
  const dims = shape[1].split(',').map((s) => s.trim()).filter((s) => s !== '').map((s) => {
    const v = Number(s.replace(/L$/, ''));
    if (!Number.isSafeInteger(v) || v < 0) throw new Error(`${file}: bad shape ${shape[1]}`);
    return v;
  });
  const n = numElements(dims);
  const start = hstart + hlen;
  const want = n * DTYPES[type].size;
  if (buf.length - start < want) throw new Error(`${file}: ${buf.length - start} data bytes, want ${want}`);
  return makeTensor(type, dims, typedFromBytes(type, buf.subarray(start, start + want), n));
}

function writeNpy(file, t) {
  const d = DTYPES[t.type];
  if (!d) throw new Error(`cannot write ${t.type} as .npy`);
  const shape = t.dims.length === 1 ? `(${t.dims[0]},)` : `(${t.dims.join(', ')})`;
  let header = `{'descr': '${d.descr}', 'fortran_order': False, 'shape': ${shape}, }`;
  const pad = 64 - ((10 + header.length + 1) % 64);
  header += ' '.repeat(pad % 64) + '\n';
  const pre = Buffer.alloc(10);
  pre.writeUInt8(0x93, 0);
  pre.write('NUMPY', 1, 'latin1');
  pre.writeUInt8(1, 6);
  pre.writeUInt8(0, 7);
  pre.writeUInt16LE(header.length, 8);
  const data = Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength);
  fs.writeFileSync(file, Buffer.concat([pre, Buffer.from(header, 'latin1'), data]));
}

// ---------------------------------------------------------------- protobuf

// Reader is a minimal protobuf wire-format reader over a Buffer.
class Reader {
  constructor(buf, start = 0, end = buf.length) {
    this.buf = buf;
    this.pos = start;
    this.end = end;
  }

  done() {
    return this.pos >= this.end;
  }

  // varint returns the next varint as a BigInt (unsigned 64-bit).
  varint() {
    let result = 0n;
    let shift = 0n;
    for (let i = 0; i < 10; i++) {
      if (this.pos >= this.end) throw new Error('truncated varint');
      const b = this.buf[this.pos++];
      result |= BigInt(b & 0x7f) << shift;
      if ((b & 0x80) === 0) return result;
      shift += 7n;
    }
    throw new Error('varint longer than 10 bytes');
  }

  // int64 reads a varint as a signed 64-bit BigInt.
  int64() {
    return BigInt.asIntN(64, this.varint());
  }

  // num reads a varint as a safe JS number (throws if it is not).
  num() {
    const v = this.int64();
    if (v > BigInt(Number.MAX_SAFE_INTEGER) || v < BigInt(Number.MIN_SAFE_INTEGER)) throw new Error(`varint ${v} is out of range`);
    return Number(v);
  }

  bytes() {
    const n = this.num();
    if (n < 0 || this.pos + n > this.end) throw new Error('truncated length-delimited field');
    const b = this.buf.subarray(this.pos, this.pos + n);
    this.pos += n;
    return b;
  }

  // sub returns a Reader over the next length-delimited field.
  sub() {
    const n = this.num();
    if (n < 0 || this.pos + n > this.end) throw new Error('truncated sub-message');
    const r = new Reader(this.buf, this.pos, this.pos + n);
    this.pos += n;
    return r;
  }

  tag() {
    const t = this.num();
    return [t >>> 3, t & 7];
  }

  skip(wire) {
    switch (wire) {
      case 0: this.varint(); break;
      case 1: this.pos += 8; break;
      case 2: { const n = this.num(); this.pos += n; break; }
      case 5: this.pos += 4; break;
      default: throw new Error(`unsupported wire type ${wire}`);
    }
    if (this.pos > this.end) throw new Error('truncated field');
  }
}

// Reads a repeated scalar field that may be packed (wire 2) or not.
function readRepeated(r, wire, scalarWire, readOne, out) {
  if (wire === 2) {
    const s = r.sub();
    while (!s.done()) out.push(readOne(s));
  } else if (wire === scalarWire) {
    out.push(readOne(r));
  } else {
    throw new Error(`unexpected wire type ${wire}`);
  }
}

const readF32 = (r) => { if (r.pos + 4 > r.end) throw new Error('truncated float'); const v = r.buf.readFloatLE(r.pos); r.pos += 4; return v; };
const readF64 = (r) => { if (r.pos + 8 > r.end) throw new Error('truncated double'); const v = r.buf.readDoubleLE(r.pos); r.pos += 8; return v; };

// decodeTensorProto decodes an ONNX TensorProto into {name, type, dims, data}.
function decodeTensorProto(buf) {
  const r = new Reader(buf);
  const dims = [];
  let dataType = 0;
  let name = '';
  let raw = null;
  let external = false;
  const floats = [], int32s = [], int64s = [], doubles = [];
  while (!r.done()) {
    const [field, wire] = r.tag();
    switch (field) {
      case 1: readRepeated(r, wire, 0, (x) => x.num(), dims); break;
      case 2: dataType = r.num(); break;
      case 4: readRepeated(r, wire, 5, readF32, floats); break;
      case 5: readRepeated(r, wire, 0, (x) => Number(BigInt.asIntN(32, x.varint())), int32s); break;
      case 7: readRepeated(r, wire, 0, (x) => x.int64(), int64s); break;
      case 8: name = r.bytes().toString('utf8'); break;
      case 9: raw = r.bytes(); break;
      case 10: readRepeated(r, wire, 1, readF64, doubles); break;
      case 14: external = r.num() === 1; break;
      default: r.skip(wire);
    }
  }
  if (external) throw new Error(`tensor ${JSON.stringify(name)} uses external data (not supported)`);
  const type = ONNX_DTYPE[dataType];
  if (!type) throw new Error(`tensor ${JSON.stringify(name)}: unsupported data type ${ONNX_TYPE_NAMES[dataType] || dataType}`);
  const n = numElements(dims);
  let data;
  if (raw) {
    data = typedFromBytes(type, raw, n);
  } else {
    const src = { float32: floats, float64: doubles, int64: int64s }[type] || int32s;
    if (src.length !== n) throw new Error(`tensor ${JSON.stringify(name)}: ${src.length} values for shape [${dims}]`);
    data = new DTYPES[type].Arr(n);
    for (let i = 0; i < n; i++) data[i] = type === 'int64' ? BigInt(src[i]) : Number(src[i]);
  }
  const t = makeTensor(type, dims, data);
  t.name = name;
  return t;
}

function readPb(file) {
  try {
    return decodeTensorProto(fs.readFileSync(file));
  } catch (e) {
    throw new Error(`${file}: ${e.message}`);
  }
}

// readTensorFile reads a .npy or .pb tensor file.
function readTensorFile(file) {
  if (file.endsWith('.npy')) return readNpy(file);
  if (file.endsWith('.pb')) return readPb(file);
  throw new Error(`${file}: unknown tensor file format (want .npy or .pb)`);
}

// ---------------------------------------------------------------- ModelProto

function readValueInfo(r) {
  const vi = { name: '', type: 'undefined', dims: null };
  while (!r.done()) {
    const [f, w] = r.tag();
    if (f === 1 && w === 2) vi.name = r.bytes().toString('utf8');
    else if (f === 2 && w === 2) {
      const tp = r.sub(); // TypeProto
      while (!tp.done()) {
        const [f2, w2] = tp.tag();
        if (f2 === 1 && w2 === 2) { // tensor_type
          const tt = tp.sub();
          while (!tt.done()) {
            const [f3, w3] = tt.tag();
            if (f3 === 1 && w3 === 0) {
              const et = tt.num();
              vi.type = ONNX_TYPE_NAMES[et] || String(et);
            } else if (f3 === 2 && w3 === 2) { // shape
              vi.dims = [];
              const sh = tt.sub();
              while (!sh.done()) {
                const [f4, w4] = sh.tag();
                if (f4 === 1 && w4 === 2) {
                  const dm = sh.sub();
                  let dim = null;
                  while (!dm.done()) {
                    const [f5, w5] = dm.tag();
                    if (f5 === 1 && w5 === 0) dim = dm.num();
                    else if (f5 === 2 && w5 === 2) dim = dm.bytes().toString('utf8');
                    else dm.skip(w5);
                  }
                  vi.dims.push(dim);
                } else sh.skip(w4);
              }
            } else tt.skip(w3);
          }
        } else tp.skip(w2);
      }
    } else r.skip(w);
  }
  return vi;
}

// readModelSignature returns the graph's real inputs (initializers excluded)
// and outputs: [{name, type, dims: (number | string | null)[] | null}].
// Each dim is a number, a dim_param name, or null when unknown.
function readModelSignature(file) {
  const buf = fs.readFileSync(file);
  const r = new Reader(buf);
  let g = null;
  while (!r.done()) {
    const [f, w] = r.tag();
    if (f === 7 && w === 2) g = r.sub();
    else r.skip(w);
  }
  if (!g) throw new Error(`${file}: no graph`);
  const inputs = [], outputs = [], inits = new Set();
  while (!g.done()) {
    const [f, w] = g.tag();
    if (f === 11 && w === 2) inputs.push(readValueInfo(g.sub()));
    else if (f === 12 && w === 2) outputs.push(readValueInfo(g.sub()));
    else if (f === 5 && w === 2) {
      const t = g.sub();
      while (!t.done()) {
        const [f2, w2] = t.tag();
        if (f2 === 8 && w2 === 2) inits.add(t.bytes().toString('utf8'));
        else t.skip(w2);
      }
    } else g.skip(w);
  }
  return { inputs: inputs.filter((vi) => !inits.has(vi.name)), outputs };
}

// ---------------------------------------------------------------- random data

// Xorshift64* generator: deterministic for a given seed.
class Rng {
  constructor(seed) {
    this.s = BigInt.asUintN(64, BigInt(seed) * 0x9e3779b97f4a7c15n + 0x2545f4914f6cdd1dn) || 1n;
  }

  nextU64() {
    let x = this.s;
    x ^= x >> 12n;
    x ^= BigInt.asUintN(64, x << 25n);
    x ^= x >> 27n;
    this.s = x;
    return BigInt.asUintN(64, x * 0x2545f4914f6cdd1dn);
  }

  // float returns a number uniform in [0, 1).
  float() {
    return Number(this.nextU64() >> 11n) / 9007199254740992;
  }
}

// hashString gives a stable 32-bit seed for a string (FNV-1a).
function hashString(s) {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h;
}

// randomTensor fills a tensor like attnrun's random inputs: floats uniform in
// [-1, 1); integers 1 three times in four else 0 (0/1 "keep" masks); bools
// true one time in four (True = masked). With keepFirst, index 0 of the last
// axis is always "unmasked" (int 1 / bool false), so that no softmax row of a
// padding or attention mask is entirely masked.
function randomTensor(type, dims, rng, keepFirst = false) {
  const d = DTYPES[type];
  if (!d) throw new Error(`cannot make random ${type} data`);
  const n = numElements(dims);
  const data = new d.Arr(n);
  const last = dims.length ? dims[dims.length - 1] : 1;
  if (type === 'float32' || type === 'float64') {
    for (let i = 0; i < n; i++) data[i] = rng.float() * 2 - 1;
  } else if (type === 'bool') {
    for (let i = 0; i < n; i++) data[i] = (keepFirst && last > 0 && i % last === 0) ? 0 : (rng.float() < 0.25 ? 1 : 0);
  } else {
    const one = type === 'int64' ? 1n : 1;
    const zero = type === 'int64' ? 0n : 0;
    for (let i = 0; i < n; i++) data[i] = (keepFirst && last > 0 && i % last === 0) || rng.float() >= 0.25 ? one : zero;
  }
  return makeTensor(type, dims, data);
}

// onesTensor is attnrun's NAME=ones input: every element 1 (true for bool).
function onesTensor(type, dims) {
  const d = DTYPES[type];
  if (!d) throw new Error(`cannot make ${type} data of ones`);
  const data = new d.Arr(numElements(dims));
  data.fill(type === 'int64' ? 1n : 1);
  return makeTensor(type, dims, data);
}

// parseDims parses "1x512x768" (also "1,512,768").
function parseDims(s) {
  if (s === '' || s === undefined) return [];
  return s.split(/[x,]/).map((p) => {
    const v = Number(p);
    if (!Number.isSafeInteger(v) || v < 0) throw new Error(`bad dims ${JSON.stringify(s)}: want sizes joined by x, e.g. 1x512x768`);
    return v;
  });
}

// ---------------------------------------------------------------- comparison

function isFloat(type) {
  return type === 'float32' || type === 'float64';
}

// compareTensors compares got against want (the reference):
//   maxAbs = max |got - want|;
//   maxRel = max |got - want| / max(|want|, atol) (atol keeps it finite near 0);
//   ok     = every element has |got - want| <= atol + rtol * |want| (numpy
//            allclose), NaN only where the reference has NaN, same infinities.
// A dtype or shape mismatch is reported in `error` with ok = false.
function compareTensors(got, want, atol, rtol) {
  const res = { maxAbs: 0, maxRel: 0, ok: true, bad: 0, error: null, n: want.data.length };
  const sameKind = got.type === want.type || (isFloat(got.type) && isFloat(want.type));
  if (!sameKind) {
    return { ...res, ok: false, maxAbs: Infinity, maxRel: Infinity, error: `dtype ${got.type}, want ${want.type}` };
  }
  if (got.dims.length !== want.dims.length || got.dims.some((d, i) => d !== want.dims[i])) {
    return { ...res, ok: false, maxAbs: Infinity, maxRel: Infinity, error: `shape [${got.dims}], want [${want.dims}]` };
  }
  const a = got.data, b = want.data;
  for (let i = 0; i < b.length; i++) {
    let x = a[i], y = b[i];
    if (typeof x === 'bigint') { x = Number(x); y = Number(y); }
    let diff;
    if (Number.isNaN(y) || Number.isNaN(x)) diff = Number.isNaN(x) && Number.isNaN(y) ? 0 : Infinity;
    else if (x === y) diff = 0; // also equal infinities
    else diff = Math.abs(x - y);
    if (Number.isNaN(diff)) diff = Infinity;
    const rel = diff === 0 ? 0 : diff / Math.max(Math.abs(y), atol);
    if (diff > res.maxAbs) res.maxAbs = diff;
    if (rel > res.maxRel) res.maxRel = rel;
    if (!(diff <= atol + rtol * Math.abs(y))) { res.ok = false; res.bad++; }
  }
  return res;
}

// ---------------------------------------------------------------- misc

// safeName maps an output name to the file name attnrun writes for it.
function safeName(name) {
  return name.replace(/[^A-Za-z0-9._-]/g, '_');
}

// toOrt converts a plain tensor to an onnxruntime Tensor.
function toOrt(ort, t) {
  const data = t.type === 'bool' ? new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.length) : t.data;
  return new ort.Tensor(t.type, data, t.dims);
}

// fromOrt converts an onnxruntime Tensor to a plain tensor (copying data).
function fromOrt(ot) {
  const d = DTYPES[ot.type];
  if (!d) throw new Error(`unsupported ORT output type ${ot.type}`);
  const src = ot.data;
  const data = new d.Arr(src.length);
  if (ot.type === 'bool') for (let i = 0; i < src.length; i++) data[i] = src[i] ? 1 : 0;
  else data.set(src);
  return makeTensor(ot.type, Array.from(ot.dims, Number), data);
}

function fmtNum(x) {
  if (x === Infinity) return 'inf';
  if (x === 0) return '0';
  return x.toExponential(2);
}

function percentile(sorted, p) {
  if (!sorted.length) return NaN;
  const idx = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[idx];
}

function listCaseDirs(root) {
  return fs.readdirSync(root, { withFileTypes: true })
    .filter((e) => e.isDirectory() && fs.existsSync(path.join(root, e.name, 'model.onnx')))
    .map((e) => e.name)
    .sort();
}

module.exports = {
  DTYPES, readNpy, writeNpy, decodeTensorProto, readPb, readTensorFile, readModelSignature,
  Rng, hashString, randomTensor, onesTensor, parseDims, compareTensors, safeName, toOrt, fromOrt, fmtNum,
  percentile, listCaseDirs, numElements, makeTensor,
};
