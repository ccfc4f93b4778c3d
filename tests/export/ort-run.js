// ort-run.js: ONNX Runtime's side of the export tests (test_export_ort.py).
// Loads an .onnx file in onnxruntime-node (CPU) once and runs it on one or
// more inputs of raw little-endian f32, each with its shape; writes each
// run's (only) output as raw little-endian f32 and prints its shape as one
// JSON line ({"shape": [...]}) per run.
//
//   node ort-run.js MODEL SHAPE IN OUT [SHAPE IN OUT ...]
//
// SHAPE is comma-separated (256,1,28,28); prefixed "i64:" (i64:3,6) the
// input is raw little-endian int64 (token indices). The module is found through
// NODE_PATH (.ci/install-deps puts it in .ci/node/node_modules). Exit 77
// when it cannot be loaded (the test skips), 1 on any other failure.
'use strict';
const fs = require('fs');

let ort;
try {
  ort = require('onnxruntime-node');
} catch (e) {
  console.error('ort-run: cannot load onnxruntime-node (' + e.message.split('\n')[0] +
                '); run .ci/install-deps');
  process.exit(77);
}

function fail(msg) {
  console.error('ort-run: ' + msg);
  process.exit(1);
}

async function main(argv) {
  if (argv.length < 4 || (argv.length - 1) % 3 !== 0)
    fail('usage: node ort-run.js MODEL SHAPE IN OUT [SHAPE IN OUT ...]');
  // Two threads: the test machines are small and shared.
  const session = await ort.InferenceSession.create(argv[0], {
    intraOpNumThreads: 2, interOpNumThreads: 1, executionMode: 'sequential'});
  if (session.inputNames.length !== 1 || session.outputNames.length !== 1)
    fail(argv[0] + ': expected one input and one output, got ' +
         session.inputNames.length + ' and ' + session.outputNames.length);
  for (let j = 1; j < argv.length; j += 3) {
    const i64 = argv[j].startsWith('i64:'), width = i64 ? 8 : 4;
    const shape = argv[j].replace(/^i64:/, '').split(',').map(Number);
    if (shape.some((d) => !Number.isInteger(d) || d <= 0)) fail('bad shape ' + argv[j]);
    const numel = shape.reduce((a, b) => a * b, 1);
    const raw = fs.readFileSync(argv[j + 1]);
    if (raw.length !== numel * width)
      fail(argv[j + 1] + ': ' + raw.length + ' bytes, shape ' + argv[j] + ' needs ' +
           numel * width);
    // A copy: the Buffer may sit at an offset not aligned for a typed array.
    const x = i64 ? new BigInt64Array(numel) : new Float32Array(numel);
    for (let i = 0; i < numel; i++) x[i] = i64 ? raw.readBigInt64LE(i * 8) : raw.readFloatLE(i * 4);
    const t = new ort.Tensor(i64 ? 'int64' : 'float32', x, shape);
    const out = await session.run({[session.inputNames[0]]: t});
    const y = out[session.outputNames[0]];
    if (y.type !== 'float32') fail('output is ' + y.type + ', not float32');
    const buf = Buffer.alloc(y.data.length * 4);
    for (let i = 0; i < y.data.length; i++) buf.writeFloatLE(y.data[i], i * 4);
    fs.writeFileSync(argv[j + 2], buf);
    console.log(JSON.stringify({shape: y.dims}));
  }
}

main(process.argv.slice(2)).catch((e) => fail(e.message));
