// ONNX Runtime (CPU execution provider, one intra-op thread, every graph optimisation) scoring an
// exported lr/fm/deepfm model the way bench/predict.sh times dtrain's C predictor: batches of
// drawn ids and values (uniform over the table's rows, fixed seed), throughput at BATCH rows and
// latency one row at a time.
// usage: node ort_deepfm.js ORT_MODULE_DIR MODEL.onnx ROWS FIELDS BATCH SECONDS LATENCY_CALLS
'use strict';
const [ortDir, modelPath, rowsArg, fieldsArg, batchArg, secsArg, callsArg] = process.argv.slice(2);
const ort = require(ortDir);
const rows = Number(rowsArg), F = Number(fieldsArg), B = Number(batchArg);
const seconds = Number(secsArg), calls = Number(callsArg);

// A small fixed-seed generator (xorshift64*), so every run draws the same batches.
let state = 0x9e3779b97f4a7c15n;
function next() {
  state ^= state >> 12n; state ^= (state << 25n) & 0xffffffffffffffffn; state ^= state >> 27n;
  return Number(((state * 0x2545f4914f6cdd1dn) & 0xffffffffffffffffn) >> 11n) / 2 ** 53;
}

function feeds(n) {
  const ids = new BigInt64Array(n * F), values = new Float32Array(n * F);
  for (let i = 0; i < n * F; i++) {
    ids[i] = BigInt(Math.floor(next() * rows));
    values[i] = next();
  }
  return {ids: new ort.Tensor('int64', ids, [n, F]), values: new ort.Tensor('float32', values, [n, F])};
}

async function main() {
  const session = await ort.InferenceSession.create(modelPath, {
    executionProviders: ['cpu'], intraOpNumThreads: 1, interOpNumThreads: 1,
    graphOptimizationLevel: 'all', executionMode: 'sequential'});
  const pool = [];
  for (let k = 0; k < 16; k++) pool.push(feeds(B));
  for (let k = 0; k < 16; k++) await session.run(pool[k]); // warm-up
  let done = 0, k = 0;
  const t0 = process.hrtime.bigint();
  let t = t0;
  while (Number(t - t0) / 1e9 < seconds) {
    await session.run(pool[k++ % pool.length]);
    done += B;
    t = process.hrtime.bigint();
  }
  const secs = Number(t - t0) / 1e9;
  console.log(`onnxruntime ${ort.env.versions ? ort.env.versions.common : ''} provider=cpu ` +
              `intra_op_threads=1 batch=${B} rows=${done} seconds=${secs.toFixed(3)} ` +
              `rows_per_s=${Math.round(done / secs)}`);
  const one = [];
  for (let i = 0; i < 64; i++) one.push(feeds(1));
  for (let i = 0; i < 100; i++) await session.run(one[i % one.length]);
  const us = new Float64Array(calls);
  for (let i = 0; i < calls; i++) {
    const a = process.hrtime.bigint();
    await session.run(one[i % one.length]);
    us[i] = Number(process.hrtime.bigint() - a) / 1e3;
  }
  let sum = 0;
  for (const x of us) sum += x;
  us.sort();
  console.log(`onnxruntime batch=1 calls=${calls} p50_us=${us[calls >> 1].toFixed(2)} ` +
              `p99_us=${us[Math.floor(calls * 0.99)].toFixed(2)} mean_us=${(sum / calls).toFixed(2)}`);
}
main().catch((e) => { console.error(`ort_deepfm.js: ${e.message}`); process.exit(1); });
