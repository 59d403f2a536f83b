// The digit showcase page: loads the bundle build.py wrote (dist/), classifies a drawn or bundled
// digit on WebGPU or WebGL2, and exposes what it computed on `window.showcase` for the tests.
// Plain ES module, no build step; serve examples/web over http://localhost (WebGPU needs a secure
// context, and modules are not loaded from file://).

const SIZE = 28; // the model's input is 28×28
const BOX = 20; // a drawn digit is fitted into a 20×20 box, as the training digits are
const PEN = 20; // the pad's pen width in its own pixels (~1/10 of a digit's height)
const TIMED_RUNS = 20; // runs of one digit timed after loading (the median is shown)
const NAMES = { webgpu: "WebGPU", webgl: "WebGL2" };
const t0 = performance.now();

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
const wanted = ["webgpu", "webgl"].includes(params.get("device")) ? params.get("device") : "auto";
$("device").value = wanted;
$("device").addEventListener("change", (e) => {
  params.set("device", e.target.value);
  location.search = params.toString();
});

function setStatus(text, error = false) {
  $("status").textContent = text;
  $("status").classList.toggle("error", error);
}

// ---- the probability bars -------------------------------------------------------------------

const bars = [];
for (let d = 0; d < 10; d++) {
  const row = document.createElement("div");
  row.className = "bar";
  row.innerHTML = `<span>${d}</span><span class="track"><span class="fill"></span></span><span class="pct"></span>`;
  $("bars").append(row);
  bars.push(row);
}

function show(result, truth = null) {
  const { probs, predicted } = result;
  const note = truth === null ? "" : truth === predicted ? "<small>✓ bundled " + truth + "</small>" : "<small>✗ bundled " + truth + "</small>";
  $("prediction").innerHTML = `${predicted}${note}`;
  bars.forEach((row, d) => {
    row.classList.toggle("top", d === predicted);
    row.querySelector(".fill").style.width = `${(100 * probs[d]).toFixed(1)}%`;
    row.querySelector(".pct").textContent = `${(100 * probs[d]).toFixed(1)} %`;
  });
}

function clearResult() {
  $("prediction").textContent = "–";
  bars.forEach((row) => {
    row.classList.remove("top");
    row.querySelector(".fill").style.width = "0";
    row.querySelector(".pct").textContent = "";
  });
}

// ---- 28×28 images on canvases ------------------------------------------------------------------

function paint(canvas, img) {
  const ctx = canvas.getContext("2d");
  const data = ctx.createImageData(SIZE, SIZE);
  for (let i = 0; i < SIZE * SIZE; i++) {
    const v = Math.round(255 * Math.min(1, Math.max(0, img[i])));
    data.data.set([v, v, v, 255], 4 * i);
  }
  ctx.putImageData(data, 0, 0);
}

// A drawing on the pad -> the model's input, the way the training digits are made: the ink's
// bounding box fitted into 20×20 (area-averaged), then moved by whole pixels so its centre of
// mass is the frame's centre.
function preprocess(canvas) {
  const { width: w, height: h } = canvas;
  const px = canvas.getContext("2d").getImageData(0, 0, w, h).data;
  let x0 = w, y0 = h, x1 = -1, y1 = -1;
  for (let y = 0; y < h; y++) {
    for (let x = 0; x < w; x++) {
      if (px[4 * (y * w + x)] > 25) {
        x0 = Math.min(x0, x); x1 = Math.max(x1, x);
        y0 = Math.min(y0, y); y1 = Math.max(y1, y);
      }
    }
  }
  if (x1 < 0) return null;
  const bw = x1 - x0 + 1, bh = y1 - y0 + 1;
  const s = BOX / Math.max(bw, bh);
  const ox = SIZE / 2 - (bw * s) / 2, oy = SIZE / 2 - (bh * s) / 2;
  const fitted = new Float32Array(SIZE * SIZE);
  for (let y = y0; y <= y1; y++) {
    const ty = Math.min(SIZE - 1, Math.floor((y - y0) * s + oy));
    for (let x = x0; x <= x1; x++) {
      const tx = Math.min(SIZE - 1, Math.floor((x - x0) * s + ox));
      fitted[ty * SIZE + tx] += (px[4 * (y * w + x)] / 255) * s * s;
    }
  }
  let total = 0, cx = 0, cy = 0;
  for (let i = 0; i < fitted.length; i++) {
    fitted[i] = Math.min(1, fitted[i]);
    total += fitted[i];
    cx += (i % SIZE) * fitted[i];
    cy += Math.floor(i / SIZE) * fitted[i];
  }
  const dx = Math.round(SIZE / 2 - 0.5 - cx / total), dy = Math.round(SIZE / 2 - 0.5 - cy / total);
  const out = new Float32Array(SIZE * SIZE);
  for (let y = 0; y < SIZE; y++) {
    for (let x = 0; x < SIZE; x++) {
      const sx = x - dx, sy = y - dy;
      if (sx >= 0 && sx < SIZE && sy >= 0 && sy < SIZE) out[y * SIZE + x] = fitted[sy * SIZE + sx];
    }
  }
  return out;
}

// ---- the model ---------------------------------------------------------------------------------

let model = null;
let samples = null; // {count, labels, images: Float32Array[]}
const runTimes = [];

async function classify(x) {
  const t = performance.now();
  const out = await model.run({ x });
  runTimes.push(performance.now() - t);
  const logits = Array.from(out.logits);
  const probs = Array.from(out.probs);
  const predicted = out.label[0];
  updateStats();
  return { logits, probs, predicted };
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

function updateStats() {
  const s = model.stats;
  const once = s.constants === undefined ? "" : `${s.constants} weight buffers at load; `;
  $("stats").textContent = `${once}${s.runs} runs: ${s.uploads} uploads, ${s.reads} reads`;
}

async function loadSamples() {
  const [info, bin] = await Promise.all([
    fetch("dist/samples.json").then((r) => r.json()),
    fetch("dist/samples.bin").then((r) => r.arrayBuffer()),
  ]);
  const all = new Float32Array(bin);
  const images = [];
  for (let i = 0; i < info.count; i++) images.push(all.subarray(i * SIZE * SIZE, (i + 1) * SIZE * SIZE));
  return { count: info.count, labels: info.labels, images };
}

async function runSample(i) {
  const result = await classify(samples.images[i]);
  paint($("seen"), samples.images[i]);
  drawOnPad(samples.images[i]);
  document.querySelectorAll("#samples button").forEach((b, j) => b.classList.toggle("on", j === i));
  show(result, samples.labels[i]);
  return result;
}

function sampleButtons() {
  samples.images.forEach((img, i) => {
    const b = document.createElement("button");
    b.type = "button";
    b.title = `bundled digit ${samples.labels[i]}`;
    const c = document.createElement("canvas");
    c.width = c.height = SIZE;
    paint(c, img);
    b.append(c);
    b.addEventListener("click", () => runSample(i).catch(fail));
    $("samples").append(b);
  });
}

// ---- the pad -----------------------------------------------------------------------------------

const pad = $("pad");
const pctx = pad.getContext("2d", { willReadFrequently: true });
let drawing = false, padDirty = false, last = null, pending = false, busy = false;

function clearPad() {
  pctx.fillStyle = "#000";
  pctx.fillRect(0, 0, pad.width, pad.height);
  padDirty = false;
}

function drawOnPad(img) {
  // a bundled digit shown on the pad, scaled up (it is classified from its own 28×28 values)
  const tmp = document.createElement("canvas");
  tmp.width = tmp.height = SIZE;
  paint(tmp, img);
  pctx.imageSmoothingEnabled = false;
  pctx.drawImage(tmp, 0, 0, pad.width, pad.height);
  padDirty = true;
}

function point(e) {
  const r = pad.getBoundingClientRect();
  return [((e.clientX - r.left) * pad.width) / r.width, ((e.clientY - r.top) * pad.height) / r.height];
}

async function classifyPad() {
  if (!model) return;
  if (busy) { pending = true; return; }
  busy = true;
  try {
    const x = preprocess(pad);
    if (x === null) { clearResult(); return; }
    paint($("seen"), x);
    const result = await classify(x);
    show(result);
    window.showcase.drawn = result;
  } finally {
    busy = false;
    if (pending) { pending = false; classifyPad().catch(fail); }
  }
}

pad.addEventListener("pointerdown", (e) => {
  if (padDirty && !drawing && document.querySelector("#samples button.on")) clearPad();
  document.querySelectorAll("#samples button").forEach((b) => b.classList.remove("on"));
  drawing = true;
  last = point(e);
  pad.setPointerCapture(e.pointerId);
  pctx.fillStyle = "#fff";
  pctx.beginPath();
  pctx.arc(last[0], last[1], PEN / 2, 0, 2 * Math.PI);
  pctx.fill();
  padDirty = true;
});
pad.addEventListener("pointermove", (e) => {
  if (!drawing) return;
  const p = point(e);
  pctx.strokeStyle = "#fff";
  pctx.lineWidth = PEN;
  pctx.lineCap = pctx.lineJoin = "round";
  pctx.beginPath();
  pctx.moveTo(last[0], last[1]);
  pctx.lineTo(p[0], p[1]);
  pctx.stroke();
  last = p;
  classifyPad().catch(fail);
});
for (const ev of ["pointerup", "pointercancel"]) {
  pad.addEventListener(ev, () => {
    if (!drawing) return;
    drawing = false;
    classifyPad().catch(fail);
  });
}
$("clear").addEventListener("click", () => {
  clearPad();
  clearResult();
  paint($("seen"), new Float32Array(SIZE * SIZE));
  document.querySelectorAll("#samples button").forEach((b) => b.classList.remove("on"));
});

// ---- start -------------------------------------------------------------------------------------

function fail(e) {
  const msg = e && e.message ? e.message : String(e);
  window.showcase.error = msg;
  setStatus(msg, true);
  throw e;
}

async function start() {
  let runtime;
  try {
    runtime = await import("./dist/jaxcore-web/index.js");
  } catch (e) {
    throw new Error(`no bundle in dist/ (run python examples/web/build.py first): ${e.message}`);
  }
  setStatus(`loading the model (${wanted})…`);
  [model, samples] = await Promise.all([runtime.load("dist/model.json", { device: wanted }), loadSamples()]);
  $("ran-on").textContent = NAMES[model.device] || model.device;
  sampleButtons();
  await model.warmup();
  const first = await runSample(0);
  const firstMs = performance.now() - t0;
  const loadMs = model.stats.loadMs ? ` (load and compile ${model.stats.loadMs.toFixed(0)} ms)` : "";
  $("t-first").innerHTML = `${firstMs.toFixed(0)} ms <span class="hint">to the first prediction${loadMs}</span>`;
  // then timed one by one, each digit uploaded, run and its outputs read back
  for (let i = 0; i < 3; i++) await classify(samples.images[i % samples.count]);
  runTimes.length = 0;
  for (let i = 0; i < TIMED_RUNS; i++) await classify(samples.images[i % samples.count]);
  const runMs = median(runTimes);
  $("t-run").innerHTML = `${runMs.toFixed(2)} ms <span class="hint">median of ${TIMED_RUNS}: upload, run, read</span>`;
  await runSample(0);
  const skipped = (model.skipped || []).map((s) => `${NAMES[s.device] || s.device}: ${s.reason}`).join("; ");
  setStatus(`ready: draw a digit or pick one${skipped ? ` (auto passed over ${skipped})` : ""}`);
  window.showcase.firstMs = firstMs;
  window.showcase.runMs = runMs;
  window.showcase.device = model.device;
  return { device: model.device, firstMs, runMs, first };
}

window.showcase = {
  error: null,
  device: null,
  firstMs: null,
  runMs: null,
  samples: () => samples && { count: samples.count, labels: samples.labels },
  stats: () => model && { ...model.stats },
  // every bundled digit through the model, one run each: what the tests compare with Python
  async runSamples() {
    const out = [];
    for (let i = 0; i < samples.count; i++) out.push(await classify(samples.images[i]));
    return out;
  },
  runSample: (i) => runSample(i),
  drawn: null, // the last drawing's result
  busy: () => busy || pending,
  classify: (x) => classify(Float32Array.from(x)),
};
clearPad();
window.showcase.ready = start().catch(fail);
