#!/usr/bin/env node
'use strict';
// diff: differential check of attnrun against ONNX Runtime ("cross-check ONNX Runtime").
//
// For every case directory under ROOT (model.onnx + test_data_set_N/{input,output}_K.pb)
// it runs each data set, plus random inputs at a few shapes (symbolic dims bound to
// a few sizes), through ONNX Runtime in-process and attnrun as a subprocess
// (`attnrun run MODEL --input NAME=FILE ... --out DIR`), and reports per model the
// max abs / max rel difference over all runs and PASS/FAIL.
//
// Reference: ORT's outputs; when ORT refuses the model, the data sets' PyTorch
// outputs (random runs then only show that attnrun runs). With --ort-only it
// compares ORT with the data sets' PyTorch outputs and does not need attnrun.

const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawnSync } = require('child_process');
const lib = require('./lib');
const { sessionOptions } = require('./ortrun');

const USAGE = `usage: node diff.js [ROOT] [--attnrun PATH] [--ort-only] [--atol A] [--rtol R]
       [--threads N] [--only REGEX] [--random-sets N] [--keep] [--verbose]

  ROOT            directory of model cases (default: <repo>/models)
  --attnrun PATH  attnrun binary (default: $ATTNRUN, else <repo>/bin/attnrun)
  --ort-only      compare ONNX Runtime with the data sets' expected outputs only
  --atol, --rtol  tolerance (default 1e-5, 1e-4): pass iff |got-ref| <= atol + rtol*|ref|
  --threads N     ORT intra-op threads (default 1)
  --only REGEX    only case directories whose name matches
  --random-sets N random shape sets per model (default 3, at most 3; 0 = data sets only)
  --keep          keep the temporary directory of inputs/outputs
  --verbose       print every run
exit status: 0 all agree, 1 some model disagrees or attnrun failed, 2 usage error`;

function usage(msg) {
  process.stderr.write(`diff: ${msg}\n${USAGE}\n`);
  process.exit(2);
}

function parseArgs(argv) {
  const repo = path.resolve(__dirname, '..', '..');
  const o = {
    root: path.join(repo, 'models'),
    attnrun: process.env.ATTNRUN || path.join(repo, 'bin', 'attnrun'),
    ortOnly: false, atol: 1e-5, rtol: 1e-4, threads: 1, only: null, randomSets: 3, keep: false, verbose: false,
  };
  let rootSet = false;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const next = () => {
      if (i + 1 >= argv.length) usage(`${a} needs a value`);
      return argv[++i];
    };
    const num = (v) => {
      const n = Number(v);
      if (!Number.isFinite(n) || n < 0) usage(`${a} wants a number >= 0, got ${JSON.stringify(v)}`);
      return n;
    };
    switch (a) {
      case '--attnrun': o.attnrun = path.resolve(next()); break;
      case '--ort-only': o.ortOnly = true; break;
      case '--atol': o.atol = num(next()); break;
      case '--rtol': o.rtol = num(next()); break;
      case '--threads': o.threads = Math.max(1, Math.floor(num(next()))); break;
      case '--only': o.only = new RegExp(next()); break;
      case '--random-sets': o.randomSets = Math.min(3, Math.floor(num(next()))); break;
      case '--keep': o.keep = true; break;
      case '--verbose': case '-v': o.verbose = true; break;
      case '--help': case '-h': process.stdout.write(USAGE + '\n'); process.exit(0); break;
      default:
        if (a.startsWith('-')) usage(`unknown flag ${a}`);
        if (rootSet) usage(`more than one ROOT given`);
        o.root = path.resolve(a);
        rootSet = true;
    }
  }
  return o;
}

// Sizes given to the i-th distinct symbolic dim in each random shape set: all
// ones; small distinct sizes; a longer sequence (33) with a batch of 1.
const SHAPE_SETS = [
  [1, 1, 1, 1],
  [2, 7, 5, 3],
  [1, 33, 12, 4],
];

function randomRuns(caseName, sig, nSets) {
  const params = [];
  for (const vi of sig.inputs) {
    if (!vi.dims) throw new Error(`input ${vi.name} has no declared shape`);
    for (const d of vi.dims) {
      if (d === null) throw new Error(`input ${vi.name} has an unknown dim`);
      if (typeof d === 'string' && !params.includes(d)) params.push(d);
    }
  }
  const n = params.length ? nSets : Math.min(nSets, 1);
  const runs = [];
  for (let s = 0; s < n; s++) {
    const bind = {};
    params.forEach((p, i) => { bind[p] = SHAPE_SETS[s][i % SHAPE_SETS[s].length]; });
    const rng = new lib.Rng(lib.hashString(caseName) * 7 + s);
    const inputs = {};
    for (const vi of sig.inputs) {
      const dims = vi.dims.map((d) => (typeof d === 'string' ? bind[d] : d));
      inputs[vi.name] = lib.randomTensor(vi.type, dims, rng, true);
    }
    const label = params.length ? 'random ' + params.map((p) => `${p}=${bind[p]}`).join(',') : 'random';
    runs.push({ label, inputs, files: null, expected: null });
  }
  return runs;
}

function dataSetRuns(dir, sig) {
  const runs = [];
  const sets = fs.readdirSync(dir).filter((d) => /^test_data_set_\d+$/.test(d))
    .sort((a, b) => Number(a.split('_').pop()) - Number(b.split('_').pop()));
  for (const set of sets) {
    const sd = path.join(dir, set);
    const inputs = {}, files = {};
    for (let k = 0; fs.existsSync(path.join(sd, `input_${k}.pb`)); k++) {
      const f = path.join(sd, `input_${k}.pb`);
      const t = lib.readPb(f);
      const name = t.name || (sig.inputs[k] && sig.inputs[k].name);
      if (!name) throw new Error(`${f}: no name and no graph input #${k}`);
      inputs[name] = t;
      files[name] = f;
    }
    const expected = {};
    for (let k = 0; fs.existsSync(path.join(sd, `output_${k}.pb`)); k++) {
      const t = lib.readPb(path.join(sd, `output_${k}.pb`));
      const name = t.name || (sig.outputs[k] && sig.outputs[k].name);
      expected[name] = t;
    }
    runs.push({ label: set, inputs, files, expected });
  }
  return runs;
}

// runAttnrun runs attnrun on one input set and returns {outputs} or {error}.
function runAttnrun(o, model, run, sig, tmp, idx) {
  const dir = path.join(tmp, `run${idx}`);
  const outDir = path.join(dir, 'out');
  fs.mkdirSync(outDir, { recursive: true });
  const args = ['run', model];
  for (const [name, t] of Object.entries(run.inputs)) {
    let f = run.files && run.files[name];
    if (!f) {
      f = path.join(dir, `in_${lib.safeName(name)}.npy`);
      lib.writeNpy(f, t);
    }
    args.push('--input', `${name}=${f}`);
  }
  args.push('--out', outDir);
  const r = spawnSync(o.attnrun, args, { encoding: 'utf8', timeout: 300000, maxBuffer: 64 << 20 });
  if (r.error) return { error: `cannot run attnrun: ${r.error.message}` };
  if (r.status !== 0) {
    const msg = (r.stderr || r.stdout || '').trim().split('\n').slice(-3).join(' | ');
    return { error: `attnrun exited ${r.status === null ? 'by ' + r.signal : r.status}: ${msg}` };
  }
  const outputs = {};
  for (const vi of sig.outputs) {
    const f = path.join(outDir, lib.safeName(vi.name) + '.npy');
    if (!fs.existsSync(f)) return { error: `attnrun wrote no ${path.basename(f)} for output ${vi.name}` };
    outputs[vi.name] = lib.readNpy(f);
  }
  return { outputs };
}

// Acc accumulates comparisons of one model against one reference.
class Acc {
  constructor() { this.maxAbs = 0; this.maxRel = 0; this.ok = true; this.runs = 0; this.errors = []; }
  add(label, got, want, o) {
    this.runs++;
    for (const name of Object.keys(want)) {
      if (!got[name]) { this.ok = false; this.errors.push(`${label}: no output ${name}`); continue; }
      const c = lib.compareTensors(got[name], want[name], o.atol, o.rtol);
      this.maxAbs = Math.max(this.maxAbs, c.maxAbs);
      this.maxRel = Math.max(this.maxRel, c.maxRel);
      if (c.error) this.errors.push(`${label} ${name}: ${c.error}`);
      else if (!c.ok) this.errors.push(`${label} ${name}: ${c.bad}/${c.n} elements beyond tolerance`);
      if (!c.ok) this.ok = false;
      if (o.verbose) process.stdout.write(`    ${label} ${name}: max abs ${lib.fmtNum(c.maxAbs)} max rel ${lib.fmtNum(c.maxRel)}${c.ok ? '' : ' FAIL'}\n`);
    }
  }
  fail(msg) { this.ok = false; this.errors.push(msg); }
  str() { return `max abs ${lib.fmtNum(this.maxAbs)}, max rel ${lib.fmtNum(this.maxRel)} (${this.runs} runs)`; }
}

async function main() {
  const o = parseArgs(process.argv.slice(2));
  if (!fs.existsSync(o.root)) usage(`ROOT ${o.root} does not exist`);
  if (!o.ortOnly && !fs.existsSync(o.attnrun)) {
    usage(`attnrun binary ${o.attnrun} not found: build it (go build -o bin/attnrun ./cmd/attnrun), set ATTNRUN, or use --ort-only`);
  }
  const ort = require('onnxruntime-node');
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'attnrun-diff-'));
  const cases = lib.listCaseDirs(o.root).filter((c) => !o.only || o.only.test(c));
  if (!cases.length) usage(`no model cases under ${o.root}`);
  const mode = o.ortOnly ? 'ONNX Runtime vs PyTorch data sets' : 'attnrun vs ONNX Runtime';
  process.stdout.write(`diff: ${mode}, ${cases.length} models under ${o.root}, atol ${o.atol}, rtol ${o.rtol}\n`);
  let pass = 0, fail = 0, refused = 0, runIdx = 0;
  const failed = [];
  for (const c of cases) {
    const dir = path.join(o.root, c);
    const model = path.join(dir, 'model.onnx');
    let sig, runs;
    try {
      sig = lib.readModelSignature(model);
      runs = dataSetRuns(dir, sig);
      if (!o.ortOnly) runs = runs.concat(randomRuns(c, sig, o.randomSets));
    } catch (e) {
      process.stdout.write(`FAIL ${c}: ${e.message}\n`);
      fail++; failed.push(c);
      continue;
    }
    let session = null;
    try {
      session = await ort.InferenceSession.create(model, sessionOptions(o.threads));
    } catch (e) {
      refused++;
      process.stdout.write(`ORT-REFUSES ${c}: ${e.message.replace(/^Load model from \S+ failed:/, '')}\n`);
    }
    const vsOrt = new Acc(), vsRef = new Acc();
    let randomRan = 0;
    for (const run of runs) {
      let ortOut = null, ortRunError = false;
      if (session) {
        const feeds = {};
        for (const [n, t] of Object.entries(run.inputs)) feeds[n] = lib.toOrt(ort, t);
        try {
          const res = await session.run(feeds);
          ortOut = {};
          for (const n of session.outputNames) ortOut[n] = lib.fromOrt(res[n]);
        } catch (e) {
          // ORT accepted the model but failed at run time: not attnrun's fault, but say so.
          process.stdout.write(`  ${c} ${run.label}: ORT run error: ${e.message}\n`);
          ortRunError = true;
        }
      }
      if (o.ortOnly) {
        if (ortOut && run.expected) vsRef.add(run.label, ortOut, run.expected, o);
        continue;
      }
      const a = runAttnrun(o, model, run, sig, tmp, runIdx++);
      if (a.error && ortRunError && !run.expected) {
        // A random shape the model itself cannot take (Swin's bw windows
        // must be a multiple of nw): both refuse it, which is agreement.
        process.stdout.write(`  ${c} ${run.label}: both refuse these shapes (attnrun: ${a.error})\n`);
        continue;
      }
      if (a.error) {
        vsOrt.fail(`${run.label}: ${a.error}`);
        vsRef.fail(`${run.label}: ${a.error}`);
        continue;
      }
      if (ortOut) vsOrt.add(run.label, a.outputs, ortOut, o);
      if (run.expected) vsRef.add(run.label, a.outputs, run.expected, o);
      else if (!session) randomRan++; // random run on an ORT-refused model: it ran
    }
    let ok, line;
    if (o.ortOnly) {
      if (!session) continue;
      ok = vsRef.ok;
      line = `ORT vs PyTorch: ${vsRef.str()}`;
    } else if (session) {
      ok = vsOrt.ok;
      line = `vs ORT: ${vsOrt.str()}; vs PyTorch data sets: max abs ${lib.fmtNum(vsRef.maxAbs)}`;
    } else {
      ok = vsRef.ok;
      line = `ORT refuses; attnrun vs PyTorch data sets: ${vsRef.str()}; ${randomRan} random-input runs ran`;
    }
    const errs = (o.ortOnly || !session ? vsRef : vsOrt).errors;
    process.stdout.write(`${ok ? 'PASS' : 'FAIL'} ${c}: ${line}\n`);
    for (const e of errs.slice(0, 5)) process.stdout.write(`    ${e}\n`);
    if (errs.length > 5) process.stdout.write(`    ... ${errs.length - 5} more\n`);
    if (ok) pass++; else { fail++; failed.push(c); }
  }
  if (o.keep) process.stdout.write(`inputs and outputs kept in ${tmp}\n`);
  else fs.rmSync(tmp, { recursive: true, force: true });
  process.stdout.write(`diff summary: ${pass} pass, ${fail} fail, ${refused} refused by ORT` +
    `${failed.length ? ' (failing: ' + failed.join(', ') + ')' : ''}\n`);
  process.exit(fail ? 1 : 0);
}

main().catch((e) => {
  process.stderr.write(`diff: ${e.stack || e.message}\n`);
  process.exit(2);
});
