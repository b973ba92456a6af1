// Scores rows with an exported ONNX model in ONNX Runtime (onnxruntime-node: one intra-op
// thread, every graph optimisation), feeding the inputs as signature.json describes them, and
// compares the scores with dtrain's, for tests/onnx.sh.
//
// usage: node ort_score.js --ort DIR --model MODEL.onnx --signature signature.json
//            (--libsvm FILE | --idx IMAGES[.gz] | --transform ROWS.jsonl --csv FILE)
//            [--limit N] [--out SCORES.tsv] [--expect REF.tsv --tol T]
//   --ort        the directory whose node_modules holds onnxruntime-node
//   --libsvm     CTR models: field-positional id:value rows (the label first)
//   --idx        sequential models: IDX images, fed as pixel / 255 in NHWC
//   --transform  feature-spec models: `dtrain data transform -n 0` of the data, whose ids (and
//                weights) feed each "c:ids" / "c:weights" input; --csv the same data, whose
//                raw cells feed the numeric inputs (the graph normalizes them)
//   --expect     one line of tab-separated scores per row (dtrain's); the run fails when a row
//                count differs or a score differs by more than T (rel:T: by more than T times
//                max(1, |dtrain's score|))
// Prints "rows=N max_abs_diff=D" (or "rows=N") and exits 0, or 1 with the reason.
'use strict';
const fs = require('fs');
const path = require('path');
const zlib = require('zlib');

function die(msg) {
  process.stderr.write(`ort_score: ${msg}\n`);
  process.exit(1);
}

const args = {};
for (let i = 2; i < process.argv.length; i += 2) {
  const k = process.argv[i];
  if (!k.startsWith('--') || i + 1 >= process.argv.length) die(`bad argument ${k}`);
  args[k.slice(2)] = process.argv[i + 1];
}
for (const k of ['ort', 'model', 'signature'])
  if (!args[k]) die(`--${k} is required`);

let ort;
try {
  ort = require(path.resolve(args.ort, 'node_modules', 'onnxruntime-node'));
} catch (e) {
  die(`cannot load onnxruntime-node from ${args.ort}: ${e.message}`);
}
const sig = JSON.parse(fs.readFileSync(args.signature, 'utf8'));
const limit = args.limit ? parseInt(args.limit, 10) : Infinity;
const BATCH = 1000;

// ---- Rows, each an object the batch builder reads ----

function readLines(file) {
  return fs.readFileSync(file, 'utf8').split('\n').filter((l) => l.trim() !== '');
}

function libsvmRows(file) {
  return readLines(file).slice(0, limit).map((line) => {
    const t = line.trim().split(/\s+/).slice(1);
    return {ids: t.map((p) => BigInt(p.split(':')[0])), values: t.map((p) => parseFloat(p.split(':')[1]))};
  });
}

function idxRows(file) {
  let b = fs.readFileSync(file);
  if (b[0] === 0x1f && b[1] === 0x8b) b = zlib.gunzipSync(b);
  const nd = b[3];
  const dims = [];
  for (let d = 0; d < nd; d++) dims.push(b.readUInt32BE(4 + 4 * d));
  const per = dims.slice(1).reduce((a, c) => a * c, 1);
  const off = 4 + 4 * nd;
  const rows = [];
  for (let r = 0; r < Math.min(dims[0], limit); r++) {
    const px = new Float32Array(per);
    for (let k = 0; k < per; k++) px[k] = b[off + r * per + k] / 255;
    rows.push({input: px});
  }
  return rows;
}

// A CSV line's cells (quotes as RFC 4180, within the line), trimmed as dtrain trims them.
function csvCells(line) {
  const cells = [];
  let cur = '', q = false, quoted = false;
  for (let i = 0; i < line.length; i++) {
    const ch = line[i];
    if (q) {
      if (ch === '"' && line[i + 1] === '"') { cur += '"'; i++; }
      else if (ch === '"') q = false;
      else cur += ch;
    } else if (ch === '"') { q = true; quoted = true; }
    else if (ch === ',') { cells.push(quoted ? cur : cur.trim()); cur = ''; quoted = false; }
    else cur += ch;
  }
  cells.push(quoted ? cur : cur.trim().replace(/\r$/, ''));
  return cells;
}

function specRows(transformFile, csvFile) {
  const tr = readLines(transformFile).slice(0, limit).map((l) => JSON.parse(l));
  const lines = readLines(csvFile);
  const header = csvCells(lines[0].replace(/^\ufeff/, ''));
  const data = lines.slice(1, 1 + tr.length).map(csvCells);
  if (data.length !== tr.length) die(`${csvFile}: ${data.length} rows, the transform ${tr.length}`);
  return tr.map((t, r) => {
    const row = {cols: t, raw: {}};
    header.forEach((h, i) => { row.raw[h] = data[r][i]; });
    return row;
  });
}

// ---- Feeds ----

function dimsOf(inp, n, len) {
  return inp.shape.map((d) => (d === 'N' ? n : typeof d === 'number' ? d : len));
}

function feeds(rows) {
  const n = rows.length;
  const f = {};
  for (const inp of sig.inputs) {
    const isInt = inp.dtype === 'int64';
    if (inp.name === 'ids' || inp.name === 'values') { // CTR
      const F = inp.shape[1];
      const a = isInt ? new BigInt64Array(n * F) : new Float32Array(n * F);
      rows.forEach((r, i) => {
        if (r.ids.length !== F) die(`row ${i}: ${r.ids.length} fields, the model takes ${F}`);
        for (let k = 0; k < F; k++) a[i * F + k] = inp.name === 'ids' ? r.ids[k] : r.values[k];
      });
      f[inp.name] = new ort.Tensor(isInt ? 'int64' : 'float32', a, [n, F]);
    } else if (inp.name === 'input') { // sequential
      const per = inp.shape.slice(1).reduce((x, c) => x * c, 1);
      const a = new Float32Array(n * per);
      rows.forEach((r, i) => a.set(r.input, i * per));
      f.input = new ort.Tensor('float32', a, dimsOf(inp, n, 0));
    } else if (inp.role === 'ids' || inp.role === 'weights') { // spec, categorical
      const lists = rows.map((r) => {
        const c = r.cols[inp.column];
        if (!c || !c.ids) die(`the transform has no ids for column ${inp.column}`);
        return c;
      });
      const L = Math.max(1, ...lists.map((c) => c.ids.length));
      const a = isInt ? new BigInt64Array(n * L) : new Float32Array(n * L);
      lists.forEach((c, i) => c.ids.forEach((id, k) => {
        if (isInt) a[i * L + k] = BigInt(id);
        else a[i * L + k] = c.weights ? c.weights[k] : 1;
      }));
      f[inp.name] = new ort.Tensor(isInt ? 'int64' : 'float32', a, [n, L]);
    } else if (inp.role === 'values') { // spec, numeric: the raw cell or the default
      const t = inp.transform;
      const w = inp.shape[1];
      const a = new Float32Array(n * w);
      rows.forEach((r, i) => {
        const cell = r.raw[t.key];
        if (cell === undefined) die(`the data has no key ${t.key}`);
        for (let k = 0; k < w; k++) {
          let v;
          if (cell === '' || w > 1) {
            if (t.default_value === undefined) die(`row ${i}: ${t.key} is missing`);
            v = t.default_value;
          } else {
            v = Number(cell);
          }
          a[i * w + k] = v;
        }
      });
      f[inp.name] = new ort.Tensor('float32', a, [n, w]);
    } else {
      die(`input ${inp.name}: unknown role`);
    }
  }
  return f;
}

async function main() {
  let rows;
  if (args.libsvm) rows = libsvmRows(args.libsvm);
  else if (args.idx) rows = idxRows(args.idx);
  else if (args.transform && args.csv) rows = specRows(args.transform, args.csv);
  else die('give --libsvm, --idx or --transform with --csv');
  const session = await ort.InferenceSession.create(args.model, {
    intraOpNumThreads: 1,
    interOpNumThreads: 1,
    graphOptimizationLevel: 'all',
  });
  const outName = sig.outputs.find((o) => o.name !== 'logits').name;
  const lines = [];
  for (let b = 0; b < rows.length; b += BATCH) {
    const part = rows.slice(b, b + BATCH);
    const res = await session.run(feeds(part), [outName]);
    const t = res[outName];
    const w = t.dims[1];
    for (let i = 0; i < part.length; i++)
      lines.push(Array.from(t.data.slice(i * w, (i + 1) * w)).map((v) => v.toPrecision(9)));
  }
  if (args.out) fs.writeFileSync(args.out, lines.map((l) => l.join('\t')).join('\n') + '\n');
  if (!args.expect) {
    console.log(`rows=${lines.length}`);
    return;
  }
  const ref = readLines(args.expect).map((l) => l.split('\t').map(Number));
  if (ref.length !== lines.length) die(`rows: ${lines.length} scored, ${ref.length} expected`);
  let max = 0, at = -1;
  for (let i = 0; i < ref.length; i++) {
    if (ref[i].length !== lines[i].length) die(`row ${i}: ${lines[i].length} scores, ${ref[i].length} expected`);
    for (let k = 0; k < ref[i].length; k++) {
      const d = Math.abs(Number(lines[i][k]) - ref[i][k]);
      if (!(d <= max)) { max = d; at = i; }
    }
  }
  // "rel:T": each difference over max(1, |dtrain's score|), for values far from 1.
  const rel = (args.tol || '').startsWith('rel:');
  const tol = parseFloat(rel ? args.tol.slice(4) : args.tol || '1e-5');
  let worst = 0, wat = -1;
  for (let i = 0; i < ref.length; i++)
    for (let k = 0; k < ref[i].length; k++) {
      const d = Math.abs(Number(lines[i][k]) - ref[i][k]) / (rel ? Math.max(1, Math.abs(ref[i][k])) : 1);
      if (!(d <= worst)) { worst = d; wat = i; }
    }
  console.log(`rows=${lines.length} max_abs_diff=${max.toExponential(2)}` +
              (rel ? ` max_rel_diff=${worst.toExponential(2)}` : ''));
  if (!(worst <= tol)) die(`row ${wat}: a score differs by ${worst}${rel ? ' (relative)' : ''} (> ${tol}): ${lines[wat].join(' ')} vs ${ref[wat].join(' ')}`);
}

main().catch((e) => die(e.message));
