#!/usr/bin/env node
'use strict';
// ortrun: run one ONNX model with ONNX Runtime (CPU) and time it.
//
//   node ortrun.js MODEL --input NAME=file.npy|file.pb|random[:DIMS]|ones[:DIMS] ...
//        [--threads N] [--iters N] [--warmup N] [--out DIR] [--json] [--quiet]
//
// Exit status: 0 ok, 1 run error, 2 usage error, 3 ONNX Runtime refuses the model.

const fs = require('fs');
const path = require('path');
const lib = require('./lib');

const USAGE = `usage: node ortrun.js MODEL --input NAME=file.npy|file.pb|random[:DIMS]|ones[:DIMS] ...
       [--threads N] [--iters N] [--warmup N] [--seed N] [--out DIR] [--json] [--quiet]

  --input NAME=SRC  a graph input from a .npy or ONNX TensorProto .pb file, or random
                    data (random:1x512x768; plain "random" needs a fully static shape),
                    or every element 1 (ones:1x512, true for bool)
  --threads N       intra-op threads (default 1); inter-op threads are always 1
  --warmup N        untimed runs first (default 0)
  --iters N         timed runs (default 1)
  --seed N          seed for random inputs (default 1)
  --out DIR         write each output as DIR/<name>.npy (name with [^A-Za-z0-9._-] -> _)
  --json            print one JSON line last: p50_ms p90_ms min_ms mean_ms peak_rss_bytes threads ...
  --quiet           do not print the outputs
exit status: 0 ok, 1 run error, 2 usage error, 3 ONNX Runtime refuses the model`;

function usage(msg) {
  process.stderr.write(`ortrun: ${msg}\n${USAGE}\n`);
  process.exit(2);
}

function parseArgs(argv) {
  const o = { model: null, inputs: [], threads: 1, iters: 1, warmup: 0, seed: 1, out: null, json: false, quiet: false };
  const intArg = (name, v, min) => {
    const n = Number(v);
    if (!Number.isSafeInteger(n) || n < min) usage(`${name} wants an integer >= ${min}, got ${JSON.stringify(v)}`);
    return n;
  };
  for (let i = 0; i < argv.length; i++) {
    let a = argv[i];
    let val = null;
    if (a.startsWith('--') && a.includes('=') && !a.startsWith('--input=')) {
      [a, val] = [a.slice(0, a.indexOf('=')), a.slice(a.indexOf('=') + 1)];
    } else if (a.startsWith('--input=')) {
      [a, val] = ['--input', a.slice(8)];
    }
    const next = () => {
      if (val !== null) return val;
      if (i + 1 >= argv.length) usage(`${a} needs a value`);
      return argv[++i];
    };
    switch (a) {
      case '--input': case '-i': {
        const spec = next();
        const eq = spec.indexOf('=');
        if (eq <= 0) usage(`--input ${JSON.stringify(spec)}: want NAME=file.npy, NAME=file.pb, NAME=random[:DIMS] or NAME=ones[:DIMS]`);
        o.inputs.push({ name: spec.slice(0, eq), src: spec.slice(eq + 1) });
        break;
      }
      case '--threads': o.threads = intArg(a, next(), 1); break;
      case '--iters': o.iters = intArg(a, next(), 1); break;
      case '--warmup': o.warmup = intArg(a, next(), 0); break;
      case '--seed': o.seed = intArg(a, next(), 0); break;
      case '--out': o.out = next(); break;
      case '--json': o.json = true; break;
      case '--quiet': case '-q': o.quiet = true; break;
      case '--help': case '-h': process.stdout.write(USAGE + '\n'); process.exit(0); break;
      default:
        if (a.startsWith('-')) usage(`unknown flag ${a}`);
        if (o.model) usage(`more than one model given (${o.model}, ${a})`);
        o.model = a;
    }
  }
  if (!o.model) usage('no model given');
  return o;
}

// sessionOptions is the configuration both diff.js and bench.js compare against.
function sessionOptions(threads) {
  return {
    intraOpNumThreads: threads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    graphOptimizationLevel: 'all',
    executionProviders: ['cpu'],
  };
}

// loadInputs builds the feeds: files as given, random data shaped from DIMS or
// the model's declared (static) shape, typed from the session's metadata.
function loadInputs(ort, session, specs, seed) {
  const meta = {};
  for (const m of session.inputMetadata || []) meta[m.name] = m;
  const feeds = {};
  const plain = {};
  for (const [k, s] of specs.entries()) {
    if (!session.inputNames.includes(s.name)) {
      throw new Error(`--input ${s.name}: the model has no input named so (inputs: ${session.inputNames.join(', ')})`);
    }
    let t;
    const kind = ['random', 'ones'].find((k) => s.src === k || s.src.startsWith(k + ':'));
    if (kind) {
      const m = meta[s.name];
      let dims;
      if (s.src.startsWith(kind + ':')) dims = lib.parseDims(s.src.slice(kind.length + 1));
      else {
        if (!m || !m.shape || m.shape.some((d) => typeof d !== 'number' || d < 0)) {
          throw new Error(`--input ${s.name}=${kind}: the declared shape [${m && m.shape}] is not static; give one, e.g. ${s.name}=${kind}:1x16`);
        }
        dims = m.shape;
      }
      const type = m && m.type ? m.type : 'float32';
      t = kind === 'ones' ? lib.onesTensor(type, dims) : lib.randomTensor(type, dims, new lib.Rng(seed * 1000003 + k), true);
    } else {
      t = lib.readTensorFile(s.src);
    }
    plain[s.name] = t;
    feeds[s.name] = lib.toOrt(ort, t);
  }
  const missing = session.inputNames.filter((n) => !(n in feeds));
  if (missing.length) throw new Error(`missing --input for ${missing.join(', ')}`);
  return { feeds, plain };
}

function firstValues(t, k = 6) {
  const vals = Array.from(t.data.subarray(0, k), (v) => (typeof v === 'bigint' ? v.toString() : t.type.startsWith('float') ? Number(v).toPrecision(6) : String(v)));
  return `[${vals.join(', ')}${t.data.length > k ? ', ...' : ''}]`;
}

// peakRSS is this process's peak resident set size in bytes: VmHWM, the
// high-water mark of its own memory map, where /proc has it. getrusage's
// maxRSS carries the parent's resident set across fork and exec (a child
// started from a Node.js process of 400 MiB reads at least 400 MiB), so
// under bench.js it read at least bench.js's size; attnrun measures the
// same way (plugins.ProcessMaxRSS).
function peakRSS() {
  try {
    const m = /^VmHWM:\s+(\d+)\s+kB/m.exec(fs.readFileSync('/proc/self/status', 'latin1'));
    if (m) return Number(m[1]) * 1024;
  } catch (e) {
    // no /proc: fall back to getrusage
  }
  return process.resourceUsage().maxRSS * 1024;
}

async function main() {
  const o = parseArgs(process.argv.slice(2));
  if (!fs.existsSync(o.model)) usage(`model ${o.model} does not exist`);
  const ort = require('onnxruntime-node');
  const rssBefore = process.memoryUsage().rss;
  let session;
  try {
    session = await ort.InferenceSession.create(o.model, sessionOptions(o.threads));
  } catch (e) {
    process.stderr.write(`ORT refuses ${o.model}: ${e.message}\n`);
    process.exit(3);
  }
  let feeds;
  try {
    ({ feeds } = loadInputs(ort, session, o.inputs, o.seed));
  } catch (e) {
    process.stderr.write(`ortrun: ${e.message}\n`);
    process.exit(2);
  }
  const times = [];
  let outs;
  for (let i = 0; i < o.warmup + o.iters; i++) {
    const t0 = process.hrtime.bigint();
    outs = await session.run(feeds);
    const dt = Number(process.hrtime.bigint() - t0) / 1e6;
    if (i >= o.warmup) times.push(dt);
  }
  if (o.out) fs.mkdirSync(o.out, { recursive: true });
  for (const name of session.outputNames) {
    const t = lib.fromOrt(outs[name]);
    if (!o.quiet) process.stdout.write(`${name}: ${t.type}[${t.dims.join(', ')}] ${firstValues(t)}\n`);
    if (o.out) lib.writeNpy(path.join(o.out, lib.safeName(name) + '.npy'), t);
  }
  const sorted = [...times].sort((a, b) => a - b);
  const mean = times.reduce((a, b) => a + b, 0) / times.length;
  const r3 = (x) => Math.round(x * 1000) / 1000;
  if (!o.quiet) {
    process.stdout.write(`${times.length} runs, ${o.threads} threads: p50 ${r3(lib.percentile(sorted, 50))} ms, min ${r3(sorted[0])} ms, mean ${r3(mean)} ms\n`);
  }
  if (o.json) {
    const stats = {
      p50_ms: r3(lib.percentile(sorted, 50)),
      p90_ms: r3(lib.percentile(sorted, 90)),
      min_ms: r3(sorted[0]),
      mean_ms: r3(mean),
      peak_rss_bytes: peakRSS(),
      base_rss_bytes: rssBefore,
      threads: o.threads,
      iters: o.iters,
      warmup: o.warmup,
      ort_version: ort.env.versions && ort.env.versions.common,
    };
    process.stdout.write(JSON.stringify(stats) + '\n');
  }
}

if (require.main === module) {
  main().catch((e) => {
    process.stderr.write(`ortrun: ${e.message}\n`);
    process.exit(1);
  });
}

module.exports = { sessionOptions };
