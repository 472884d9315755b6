#!/usr/bin/env node
'use strict';
// bench: attnrun vs ONNX Runtime side by side ("beat ONNX Runtime on CPU").
//
// For each workload of a JSON file (model + input shapes or sources), runs
//   node ortrun.js MODEL --input NAME=random:DIMS ... --threads N --iters N --warmup N --json
// and
//   attnrun bench MODEL --input NAME=random:DIMS ... --threads N --iters N --warmup N --json
// each in a fresh process (so peak RSS is per workload), one after the other,
// and prints a markdown table of median latency and peak RSS. With --rounds
// N each workload runs as N rounds, each an attnrun process and an ORT
// process back to back (which goes first alternating), each process with
// the workload's full warmup and timed runs: a shared machine's speed
// drifts from minute to minute, and the per-round ratios compare the two
// under the same drift. A runtime's p50 is then the median of its rounds'
// p50s, its peak RSS the largest, and the latency ratio the median of the
// rounds' ratios. (Splitting the timed runs over the rounds instead
// favoured attnrun: ORT's median over 34 runs of seed 000's MHA at S=512
// read 2-5% above its median over 100 in three of three tries, attnrun's
// either side of it.) A workload with
// "attnrunArgs" adds flags to attnrun's command line (e.g. --in-process);
// "precision": "bf16" runs attnrun with --precision bf16 (ORT stays fp32) and
// reports attnrun's largest deviation from its own fp32 output on the same
// input; one with "gflop" reports attnrun's GFLOP/s, and with --peak that as a
// share of this machine's peak (the Go roofline benchmark, ops/blas). An
// input given as {"shape": [...], "scale": k} is random data times k,
// written once to a .npy file both runtimes read (scaledInput): seed 000's
// MHA with x times 6 has attention logits of spread σ ≈ 4, as trained
// models' are, where the random weights of the exports give σ ≈ 0.1.

const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawnSync } = require('child_process');
const { readNpy, writeNpy, Rng, hashString, randomTensor } = require('./lib');

const REPO = path.resolve(__dirname, '..', '..');

const USAGE = `usage: node bench.js [--workloads FILE] [--threads N] [--iters N] [--warmup N] [--rounds N]
       [--bench-models DIR] [--attnrun PATH] [--only REGEX] [--ort-only] [--attnrun-only] [--peak] [--json-out FILE]

  --workloads FILE    workload list (default: tools/ort/workloads.json)
  --threads N         intra-op threads for both runtimes (default 2)
  --iters, --warmup   override every workload's counts
  --rounds N          run each workload as N rounds of attnrun then ORT (alternating which goes first),
                      each process with the full warmup and timed runs; report the median of the
                      rounds' p50s and the median of their ratios (default 1)
  --bench-models DIR  where {bench} points (default: $BENCH_MODELS, else <repo>/bench/models)
  --attnrun PATH      attnrun binary (default: $ATTNRUN, else <repo>/bin/attnrun)
  --only REGEX        only workloads whose name matches
  --ort-only          do not run attnrun;  --attnrun-only: do not run ORT
  --peak              measure the machine's fp32 and bf16 peak (go test -bench Roofline/peak in
                      ops/blas: needs the Go toolchain) and print GFLOP/s as a share of it; and for
                      each workload with "gflop", the FP pipes' floor (go test -bench Floor): the
                      median time of jobs that only issue that many multiply-adds
  --json-out FILE     also write the raw results as JSON`;

function usage(msg) {
  process.stderr.write(`bench: ${msg}\n${USAGE}\n`);
  process.exit(2);
}

function parseArgs(argv) {
  const o = {
    workloads: path.join(__dirname, 'workloads.json'),
    threads: 2, iters: null, warmup: null,
    benchModels: process.env.BENCH_MODELS || path.join(REPO, 'bench', 'models'),
    attnrun: process.env.ATTNRUN || path.join(REPO, 'bin', 'attnrun'),
    only: null, ort: true, ours: true, jsonOut: null, peak: false, rounds: 1,
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const next = () => {
      if (i + 1 >= argv.length) usage(`${a} needs a value`);
      return argv[++i];
    };
    const int = (v, min) => {
      const n = Number(v);
      if (!Number.isSafeInteger(n) || n < min) usage(`${a} wants an integer >= ${min}, got ${JSON.stringify(v)}`);
      return n;
    };
    switch (a) {
      case '--workloads': o.workloads = path.resolve(next()); break;
      case '--threads': o.threads = int(next(), 1); break;
      case '--iters': o.iters = int(next(), 1); break;
      case '--warmup': o.warmup = int(next(), 0); break;
      case '--rounds': o.rounds = int(next(), 1); break;
      case '--bench-models': o.benchModels = path.resolve(next()); break;
      case '--attnrun': o.attnrun = path.resolve(next()); break;
      case '--only': o.only = new RegExp(next()); break;
      case '--ort-only': o.ours = false; break;
      case '--attnrun-only': o.ort = false; break;
      case '--peak': o.peak = true; break;
      case '--json-out': o.jsonOut = path.resolve(next()); break;
      case '--help': case '-h': process.stdout.write(USAGE + '\n'); process.exit(0); break;
      default: usage(`unknown argument ${a}`);
    }
  }
  return o;
}

// lastJSON returns the last stdout line that parses as a JSON object.
function lastJSON(stdout) {
  const lines = stdout.trim().split('\n').reverse();
  for (const l of lines) {
    const s = l.trim();
    if (!s.startsWith('{')) continue;
    try {
      return JSON.parse(s);
    } catch (_) { /* keep looking */ }
  }
  return null;
}

function tail(s, n = 2) {
  return (s || '').trim().split('\n').slice(-n).join(' | ');
}

// run spawns one timed process and returns {stats} or {refused|error: message}.
function run(cmd, args, refusedCode) {
  const r = spawnSync(cmd, args, { encoding: 'utf8', timeout: 20 * 60 * 1000, maxBuffer: 64 << 20 });
  if (r.error) return { error: `cannot run ${path.basename(cmd)}: ${r.error.message}` };
  if (refusedCode !== undefined && r.status === refusedCode) {
    return { refused: tail(r.stderr, 1).replace(/^ORT refuses \S+: (Load model from \S+ failed:)?/, '') };
  }
  if (r.status !== 0) return { error: `exit ${r.status === null ? r.signal : r.status}: ${tail(r.stderr || r.stdout)}` };
  const stats = lastJSON(r.stdout);
  if (!stats || typeof stats.p50_ms !== 'number') return { error: `no JSON stats line in output: ${tail(r.stdout)}` };
  return { stats };
}

// goBench runs `go test ./ops/blas -run ^$ -bench PATTERN ARGS...` in the
// repository and returns {stdout}, or {error} naming what failed.
function goBench(pattern, args) {
  const r = spawnSync('go', ['test', './ops/blas', '-run', '^$', '-bench', pattern, ...args],
    { cwd: REPO, encoding: 'utf8', timeout: 10 * 60 * 1000 });
  if (r.error || r.status !== 0) return { error: `go test -bench ${pattern} failed: ${r.error ? r.error.message : tail(r.stderr || r.stdout)}` };
  return { stdout: r.stdout };
}

// rooflineRefuses says why the Go roofline (peak and floor) cannot measure
// `threads` cores, or '' when it can (1 or 2).
function rooflineRefuses(threads) {
  return threads > 2 ? `the roofline measures 1 or 2 cores, not ${threads}` : '';
}

// measurePeaks runs the Go roofline benchmark's peak loops on `threads`
// cores (1 or 2) and returns {fp32, bf16} in GFLOP/s (bf16 absent where the
// CPU has no AVX512_BF16), or {error}.
function measurePeaks(threads) {
  const refused = rooflineRefuses(threads);
  if (refused) return { error: refused };
  const r = goBench(`Roofline/peak/(fma|bf16)/${threads}core$`, ['-benchtime', '3000x']);
  if (r.error) return r;
  const peaks = {};
  for (const line of r.stdout.split('\n')) {
    const m = line.match(/^BenchmarkRoofline\/peak\/(fma|bf16)\/\dcore\S*\s+\d+\s+\S+ ns\/op\s+([0-9.]+) GFLOP\/s/);
    if (m) peaks[m[1] === 'fma' ? 'fp32' : 'bf16'] = Number(m[2]);
  }
  if (!peaks.fp32) return { error: `no peak in go test output: ${tail(r.stdout)}` };
  return peaks;
}

// cpuFamily returns " (family F, model M)" from /proc/cpuinfo (Linux), or
// "": a VM's model name ("AMD EPYC") does not say which core it is, and the
// kernels' speed depends on it (a Zen 4 and a Zen 5 differ twofold).
function cpuFamily() {
  let info;
  try {
    info = fs.readFileSync('/proc/cpuinfo', 'utf8');
  } catch {
    return '';
  }
  const family = info.match(/^cpu family\s*:\s*(\d+)/m);
  const model = info.match(/^model\s*:\s*(\d+)/m);
  return family && model ? ` (family ${family[1]}, model ${model[1]})` : '';
}

// attnrunKernels returns the CPU kernels attnrun's cpu backend runs here
// (the "kernels" line of attnrun backends: avx512, avx512+embedded-broadcast
// on Zen 4, ...), or "" when it does not say.
function attnrunKernels(bin) {
  const r = spawnSync(bin, ['backends'], { encoding: 'utf8', timeout: 60 * 1000 });
  const m = (r.stdout || '').match(/^\s*kernels:\s*(\S+)/m);
  return m ? m[1] : '';
}

// measureFloor runs the Go roofline's BenchmarkFloor (ops/blas) for one
// workload: gflop GFLOP of multiply-adds in precision ('fp32' or 'bf16') on
// `threads` cores, and returns the median time (ms) of jobs that do nothing
// but those multiply-adds on registers (the FP pipes' floor), or {error}.
// main measures each workload's floor right after its rounds, so that the
// floor sees the same minutes of a shared machine as the runtimes' medians
// it bounds (measured once for all workloads at the end, a stretch of other
// guests' load once put ViT's floor at 9.0 ms, twice its 4.5 and above
// ORT's median).
function measureFloor(threads, precision, gflop) {
  const prec = precision === 'bf16' ? 'bf16' : 'fma';
  const r = goBench(`Floor/${prec}/${threads}core/`, ['-benchtime', '1x', '-args', '-floor-gflop', String(gflop)]);
  if (r.error) return r;
  for (const line of r.stdout.split('\n')) {
    const m = line.match(/^BenchmarkFloor\/\S+\s.*\s([0-9.]+) p50-ms/);
    if (m) return { ms: Number(m[1]) };
  }
  return { error: `no floor in go test output: ${tail(r.stdout)}` };
}

// inputDirs are scaledInput's temporary directories, removed at exit.
const inputDirs = [];
process.on('exit', () => {
  for (const d of inputDirs) fs.rmSync(d, { recursive: true, force: true });
});

// scaledInput writes a float32 input of src.shape, uniform in [-1, 1) (as
// the runtimes' random inputs) times src.scale and seeded by the workload's
// and the input's names, to a .npy file in a fresh temporary directory,
// and returns its path.
function scaledInput(workload, name, src) {
  if (!Array.isArray(src.shape) || !(src.scale > 0)) {
    throw new Error(`${workload}: input ${name}: want a shape array or {"shape": [...], "scale": k > 0}`);
  }
  const t = randomTensor('float32', src.shape, new Rng(hashString(`${workload}/${name}`)));
  for (let i = 0; i < t.data.length; i++) t.data[i] *= src.scale;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'attnrun-bench-input-'));
  inputDirs.push(dir);
  const file = path.join(dir, `${name}.npy`);
  writeNpy(file, t);
  return file;
}

// bf16Error runs `attnrun run` on the workload's inputs (same seeded random
// data) in fp32 and in bf16 and returns max |bf16 - fp32| / max |fp32| over
// every float32 output, or {error}.
function bf16Error(o, model, inputs) {
  const dirs = {};
  for (const prec of ['fp32', 'bf16']) {
    dirs[prec] = fs.mkdtempSync(path.join(os.tmpdir(), `attnrun-bench-${prec}-`));
    const args = ['run', model, ...inputs.flatMap((i) => ['--input', i]), '--threads', String(o.threads), '--precision', prec, '--out', dirs[prec]];
    const r = spawnSync(o.attnrun, args, { encoding: 'utf8', timeout: 10 * 60 * 1000, maxBuffer: 64 << 20 });
    if (r.error || r.status !== 0) return { error: `attnrun run --precision ${prec}: ${r.error ? r.error.message : tail(r.stderr)}` };
  }
  let diff = 0;
  let scale = 0;
  try {
    for (const f of fs.readdirSync(dirs.fp32)) {
      const a = readNpy(path.join(dirs.fp32, f));
      const b = readNpy(path.join(dirs.bf16, f));
      if (a.type !== 'float32') continue;
      for (let i = 0; i < a.data.length; i++) {
        diff = Math.max(diff, Math.abs(a.data[i] - b.data[i]));
        scale = Math.max(scale, Math.abs(a.data[i]));
      }
    }
  } finally {
    for (const d of Object.values(dirs)) fs.rmSync(d, { recursive: true, force: true });
  }
  return { rel: scale > 0 ? diff / scale : diff, abs: diff };
}

// displayPath shows a path relative to the repository when it lies inside it.
function displayPath(p) {
  const rel = path.relative(REPO, p);
  return rel.startsWith('..') || path.isAbsolute(rel) ? p : rel;
}

const median = (xs) => {
  const v = [...xs].sort((a, b) => a - b);
  const m = v.length >> 1;
  return v.length % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
};

// combineRounds folds the results of one runtime's rounds into one: the
// first refusal or error as it is, else stats whose p50_ms is the median of
// the rounds' p50s and peak_rss_bytes (and base_rss_bytes) the largest,
// with every round's p50 in rounds_p50_ms.
function combineRounds(rs) {
  const bad = rs.find((r) => !r.stats);
  if (bad) return bad;
  if (rs.length === 1) return rs[0];
  const stats = { ...rs[0].stats };
  stats.rounds_p50_ms = rs.map((r) => r.stats.p50_ms);
  stats.p50_ms = median(stats.rounds_p50_ms);
  for (const k of ['peak_rss_bytes', 'base_rss_bytes']) {
    if (rs.every((r) => typeof r.stats[k] === 'number')) stats[k] = Math.max(...rs.map((r) => r.stats[k]));
  }
  return { stats };
}

// latencyRatio is attnrun's p50 over ORT's: with rounds, the median of the
// rounds' ratios (each round's two runs close in time).
function latencyRatio(r) {
  const ok = (x) => x && x.stats;
  if (!ok(r.ours) || !ok(r.ort)) return NaN;
  const a = r.ours.stats.rounds_p50_ms;
  const b = r.ort.stats.rounds_p50_ms;
  if (a && b && a.length === b.length) return median(a.map((x, i) => x / b[i]));
  return r.ours.stats.p50_ms / r.ort.stats.p50_ms;
}

const fmtMs = (x) => (x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x >= 1 ? x.toFixed(2) : x.toFixed(3));
const fmtMiB = (b) => (b / 2 ** 20).toFixed(0);
const fmtRatio = (x) => (Number.isFinite(x) ? x.toFixed(2) + '×' : '–');

function cell(res, f) {
  if (!res) return '–';
  if (res.refused !== undefined) return 'ORT refuses';
  if (res.error) return 'error';
  return f(res.stats);
}

function main() {
  const o = parseArgs(process.argv.slice(2));
  let spec;
  try {
    spec = JSON.parse(fs.readFileSync(o.workloads, 'utf8'));
  } catch (e) {
    usage(`cannot read workloads ${o.workloads}: ${e.message}`);
  }
  if (!Array.isArray(spec.workloads)) usage(`${o.workloads}: no "workloads" list`);
  const defaults = { iters: 10, warmup: 2, ...(spec.defaults || {}) };
  if (o.ours && !fs.existsSync(o.attnrun)) {
    usage(`attnrun binary ${o.attnrun} not found: build it (go build -o bin/attnrun ./cmd/attnrun), set ATTNRUN, or use --ort-only`);
  }
  const ortrun = path.join(__dirname, 'ortrun.js');
  const results = [];
  const notes = [];
  const refusedModels = new Set();
  for (const w of spec.workloads) {
    if (o.only && !o.only.test(w.name)) continue;
    const model = path.resolve(REPO, w.model.replace('{bench}', o.benchModels));
    const iters = o.iters ?? w.iters ?? defaults.iters;
    const warmup = o.warmup ?? w.warmup ?? defaults.warmup;
    // An input is a shape (random data), a source string both runtimes
    // read, e.g. "ones:1x512" (an attention mask that keeps every key), or
    // {shape, scale} (scaledInput).
    const inputs = Object.entries(w.inputs || {}).map(([n, src]) => {
      if (Array.isArray(src)) return `${n}=random:${src.join('x')}`;
      if (typeof src === 'object') return `${n}=${scaledInput(w.name, n, src)}`;
      return `${n}=${src}`;
    });
    const common = [];
    for (const s of inputs) common.push('--input', s);
    const precision = w.precision || 'fp32';
    const row = { name: w.name, model, iters, warmup, threads: o.threads, precision, gflop: w.gflop || null, ours: null, ort: null };
    if (!fs.existsSync(model)) {
      row.missing = true;
      results.push(row);
      process.stderr.write(`bench: ${w.name}: missing ${model} (make bench-models)\n`);
      continue;
    }
    row.rounds = o.rounds;
    process.stderr.write(`bench: ${w.name} (${o.rounds > 1 ? `${o.rounds} rounds of ` : ''}${iters} iters, ${warmup} warmup, ${o.threads} threads) ...\n`);
    const counts = ['--threads', String(o.threads), '--iters', String(iters), '--warmup', String(warmup), '--json'];
    const ourRuns = [];
    const ortRuns = [];
    const runOurs = () => ourRuns.push(run(o.attnrun, ['bench', model, ...common, ...counts, '--precision', precision, ...(w.attnrunArgs || [])]));
    const runOrt = () => ortRuns.push(run(process.execPath, [ortrun, model, ...common, ...counts, '--quiet'], 3));
    for (let k = 0; k < o.rounds; k++) {
      // Stop a runtime's rounds at its first refusal or error; alternate
      // which runtime goes first.
      const steps = [o.ours && !ourRuns.some((r) => !r.stats) && runOurs, o.ort && !ortRuns.some((r) => !r.stats) && runOrt].filter(Boolean);
      if (k % 2 === 1) steps.reverse();
      for (const step of steps) step();
    }
    if (o.ours) {
      row.ours = combineRounds(ourRuns);
      if (row.ours.error) notes.push(`${w.name}: attnrun ${row.ours.error}`);
      if (precision !== 'fp32' && !row.ours.error) {
        row.err = bf16Error(o, model, inputs);
        if (row.err.error) notes.push(`${w.name}: ${row.err.error}`);
      }
    }
    if (o.ort) {
      row.ort = combineRounds(ortRuns);
      if (row.ort.error) notes.push(`${w.name}: ORT ${row.ort.error}`);
      if (row.ort.refused !== undefined && !refusedModels.has(model)) {
        refusedModels.add(model);
        notes.push(`${displayPath(model)}: ORT refuses the model: ${row.ort.refused}`);
      }
    }
    if (o.peak && o.ours && row.gflop && !rooflineRefuses(o.threads)) { // else the peak's note says why
      process.stderr.write(`bench: ${w.name}: the FP pipes' floor for ${row.gflop} GFLOP (go test -bench Floor) ...\n`);
      const floor = measureFloor(o.threads, precision, row.gflop);
      if (floor.error) notes.push(`${w.name}: floor: ${floor.error}`);
      else row.floor_ms = floor.ms;
    }
    results.push(row);
  }

  let peaks = null;
  if (o.peak && o.ours) {
    process.stderr.write(`bench: measuring the ${o.threads}-core peak (go test -bench Roofline/peak) ...\n`);
    peaks = measurePeaks(o.threads);
    if (peaks.error) {
      notes.push(`peak: ${peaks.error}`);
      peaks = null;
    }
  }
  const ortVersion = results.map((r) => r.ort && r.ort.stats && r.ort.stats.ort_version).find(Boolean);
  const cpus = os.cpus();
  const kernels = o.ours ? attnrunKernels(o.attnrun) : '';
  const out = [];
  out.push(`attnrun vs ONNX Runtime${ortVersion ? ' ' + ortVersion : ''} (CPU EP, graph optimization all, sequential, inter-op 1), ` +
    `${o.threads} intra-op threads, batch 1; ${cpus.length} × ${cpus[0] ? cpus[0].model.trim() : 'cpu'}${cpuFamily()}` +
    `${kernels ? `, attnrun kernels ${kernels}` : ''}; ` +
    (o.rounds > 1
      ? `${o.rounds} rounds per workload, each an attnrun and an ORT process back to back (alternating which goes first): ` +
        'p50 is the median of the rounds\' medians, the latency ratio the median of the rounds\' ratios.'
      : 'median of the timed runs.'));
  out.push('');
  if (peaks) {
    out.push(`Peak (FP pipes, ${o.threads} core${o.threads > 1 ? 's' : ''}, go test -bench Roofline/peak): fp32 ${peaks.fp32.toFixed(0)} GFLOP/s` +
      (peaks.bf16 ? `, bf16 ${peaks.bf16.toFixed(0)} GFLOP/s` : '') + '.');
    out.push('');
  }
  out.push('| workload | precision | attnrun p50 ms | ORT p50 ms (fp32) | latency ratio (attnrun/ORT) | attnrun GFLOP/s | % of peak | FP-pipe floor p50 ms | floor/ORT | bf16 error | attnrun peak RSS MiB | ORT peak RSS MiB | RSS ratio |');
  out.push('| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |');
  for (const r of results) {
    if (r.missing) {
      out.push(`| ${r.name} | ${r.precision} | missing model | | | | | | | | | | |`);
      continue;
    }
    const ok = (x) => x && x.stats;
    const lat = latencyRatio(r);
    const rss = ok(r.ours) && ok(r.ort) && r.ort.stats.peak_rss_bytes ? r.ours.stats.peak_rss_bytes / r.ort.stats.peak_rss_bytes : NaN;
    const gflops = ok(r.ours) && r.gflop ? r.gflop / (r.ours.stats.p50_ms / 1000) : NaN;
    const peak = peaks && peaks[r.precision];
    const pct = Number.isFinite(gflops) && peak ? `${(100 * gflops / peak).toFixed(0)}%` : '–';
    const err = r.err && !r.err.error ? r.err.rel.toExponential(1) : '–';
    const floor = r.floor_ms;
    out.push(`| ${r.name} | ${r.precision} | ${cell(r.ours, (s) => fmtMs(s.p50_ms))} | ${cell(r.ort, (s) => fmtMs(s.p50_ms))} | ${fmtRatio(lat)} | ` +
      `${Number.isFinite(gflops) ? gflops.toFixed(0) : '–'} | ${pct} | ${floor ? fmtMs(floor) : '–'} | ` +
      `${fmtRatio(floor && ok(r.ort) ? floor / r.ort.stats.p50_ms : NaN)} | ${err} | ` +
      `${cell(r.ours, (s) => fmtMiB(s.peak_rss_bytes))} | ${cell(r.ort, (s) => fmtMiB(s.peak_rss_bytes))} | ${fmtRatio(rss)} |`);
  }
  out.push('');
  const base = results.map((r) => r.ort && r.ort.stats && r.ort.stats.base_rss_bytes).filter(Boolean);
  out.push(`Latency ratio < 1: attnrun is faster. ORT peak RSS is the whole Node.js process` +
    (base.length ? ` (about ${fmtMiB(Math.min(...base))} MiB before the session is created)` : '') + '. ' +
    'ORT always runs fp32; a bf16 row compares attnrun in bf16 with ORT in fp32. GFLOP/s is the workload\'s matrix-product ' +
    'flops (2·m·n·k summed over the products, workloads.json "gflop") over attnrun\'s p50; % of peak divides it by the peak of the ' +
    'row\'s precision. FP-pipe floor: the median time of jobs that issue only the workload\'s multiply-adds, on registers, ' +
    'on as many cores, measured right after the row\'s rounds (go test -bench Floor, ops/blas): no runtime\'s median can be below it; floor/ORT is ' +
    'the lowest latency ratio this machine allows. bf16 error: max |bf16 − fp32| / max |fp32| over the outputs of `attnrun run` on the same random input.');
  for (const n of notes) out.push(`- ${n}`);
  process.stdout.write(out.join('\n') + '\n');
  if (o.jsonOut) fs.writeFileSync(o.jsonOut, JSON.stringify(results, null, 2) + '\n');
}

main();
