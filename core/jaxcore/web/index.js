// jaxcore-web: runs a computation recorded in Python (jaxcore.record, written by
// jaxcore.web.write_bundle) in a web page, its data staying on the GPU between dispatches.
//
//   import { load } from "./jaxcore-web/index.js";
//   const model = await load("model.json", { device: "auto" });   // "auto" | "webgpu" | "webgl"
//   await model.warmup();
//   const { logits } = await model.run({ x: new Float32Array(784) });
//   model.dispose();
//
// Plain JavaScript, no dependencies. A bundle lists its targets in preference order; each names the
// runtime module beside this file that runs its programs (webgpu.js, webgl.js, ...), and this file
// drives any of them through one interface: open(options) -> ctx, unsupported(ctx, program),
// compileAll(ctx, programs), upload(ctx, bytes) -> buf, dispatch(ctx, compiled, bufs) -> bufs,
// read(ctx, buf, nbytes), free(ctx, buf), begin(ctx), end(ctx), close(ctx, compiled). The step
// graph, the constants, buffer lifetimes and input validation are here, once.

const FORMAT = "jaxcore-web-bundle";
const ARRAYS = {
  float32: Float32Array,
  int32: Int32Array,
  uint32: Uint32Array,
  bool: Int32Array, // jaxcore's bools are 4-byte 0/1
  float16: Uint16Array, // raw halves
  float64: Float64Array,
};

function message(e) {
  return String((e && e.message) || e);
}

async function fetchBytes(url, what) {
  const res = await fetch(url);
  if (!res.ok) throw new Error(`jaxcore-web: fetching ${what} ${url} failed: HTTP ${res.status}`);
  return new Uint8Array(await res.arrayBuffer());
}

async function bundleOf(source, options) {
  if (typeof source === "string" || source instanceof URL) {
    const url = new URL(source, globalThis.location ? globalThis.location.href : undefined);
    const res = await fetch(url);
    if (!res.ok) throw new Error(`jaxcore-web: fetching ${url} failed: HTTP ${res.status}`);
    return { bundle: await res.json(), base: url };
  }
  const base = options.baseUrl || (globalThis.location ? globalThis.location.href : undefined);
  return { bundle: source, base: base === undefined ? undefined : new URL(base) };
}

async function binaryOf(bundle, base, options) {
  let bin = options.binary;
  if (bin === undefined) bin = await fetchBytes(new URL(bundle.binary, base), "the constants");
  else if (typeof bin === "string" || bin instanceof URL) bin = await fetchBytes(new URL(bin, base), "the constants");
  else if (bin instanceof ArrayBuffer) bin = new Uint8Array(bin);
  else if (ArrayBuffer.isView(bin)) bin = new Uint8Array(bin.buffer, bin.byteOffset, bin.byteLength);
  if (bin.byteLength !== bundle.binaryBytes) {
    throw new Error(`jaxcore-web: the constants file has ${bin.byteLength} bytes; the bundle expects ${bundle.binaryBytes}`);
  }
  return bin;
}

// When each value is last read (its buffer is freed after that step); outputs and constants are
// never freed by the steps, an input no step reads right after its upload.
function lifetimes(target) {
  const last = new Array(target.values.length).fill(-1);
  target.steps.forEach((s, i) => {
    for (const v of s.inputs) last[v] = i;
    for (const v of s.outputs) if (last[v] < i) last[v] = i;
  });
  const kept = new Set([...Object.values(target.outputs), ...target.constants.map((c) => c.value)]);
  const frees = target.steps.map(() => []);
  const early = [];
  last.forEach((i, v) => {
    if (kept.has(v)) return;
    if (i >= 0) frees[i].push(v);
    else early.push(v);
  });
  return { frees, early };
}

// Open `target`'s runtime, check and compile its programs, upload its constants; a reason on failure.
async function open(target, bundle, getBinary, options) {
  if (!/^[A-Za-z0-9_-]+\.js$/.test(target.runtime || "") || target.runtime === "index.js") {
    throw new Error(`the runtime module name ${JSON.stringify(target.runtime)} is not a plain file name`);
  }
  const rt = await import(new URL(`./${target.runtime}`, import.meta.url).href);
  const ctx = await rt.open(options[target.device] || {});
  let compiled = [];
  try {
    for (const [i, p] of target.programs.entries()) {
      const why = rt.unsupported(ctx, p);
      if (why) throw new Error(`program ${i}: ${why}`);
    }
    const t0 = performance.now();
    compiled = await rt.compileAll(ctx, target.programs);
    const compileMs = performance.now() - t0;
    compiled.forEach((c, i) => {
      if (c.ok) return;
      const errors = (c.messages || []).filter((m) => m.type === "error").map((m) => m.message);
      throw new Error(`program ${i} did not compile: ${c.unsupported || errors.join("; ") || "no reason given"}`);
    });
    const bin = await getBinary();
    const constants = target.constants.map((c) => [c.value, rt.upload(ctx, bin.subarray(c.offset, c.offset + c.length))]);
    return new Model(bundle, target, rt, ctx, compiled, constants, compileMs);
  } catch (e) {
    rt.close(ctx, compiled);
    throw e;
  }
}

export async function load(source, options = {}) {
  const t0 = performance.now();
  const { bundle, base } = await bundleOf(source, options);
  if (!bundle || bundle.format !== FORMAT) throw new Error(`jaxcore-web: not a ${FORMAT} (format: ${bundle && bundle.format})`);
  if (bundle.version !== 1) throw new Error(`jaxcore-web: ${FORMAT} version ${bundle.version} is not supported`);
  const want = options.device || "auto";
  const targets = want === "auto" ? bundle.targets : bundle.targets.filter((t) => t.device === want);
  if (!targets.length) {
    const have = bundle.targets.map((t) => t.device).join(", ");
    throw new Error(`jaxcore-web: the bundle has no ${JSON.stringify(want)} target (it has: ${have})`);
  }
  let binary = null;
  const getBinary = async () => binary || (binary = await binaryOf(bundle, base, options));
  const skipped = [];
  for (const target of targets) {
    try {
      const model = await open(target, bundle, getBinary, options);
      model.skipped = skipped;
      model.stats.loadMs = performance.now() - t0;
      return model;
    } catch (e) {
      skipped.push({ device: target.device, reason: message(e) });
    }
  }
  const lines = skipped.map((s) => `  ${s.device}: ${s.reason}`).join("\n");
  throw new Error(`jaxcore-web: no target of ${bundle.name || "the bundle"} can run here:\n${lines}`);
}

function describe(spec) {
  const n = spec.shape.reduce((a, b) => a * b, 1);
  return `${ARRAYS[spec.dtype].name} of ${n} elements (${spec.dtype} [${spec.shape.join(", ")}])`;
}

class Model {
  constructor(bundle, target, rt, ctx, compiled, constants, compileMs) {
    this.name = bundle.name;
    this.device = target.device;
    const freeze = (specs) =>
      Object.freeze(Object.fromEntries(Object.entries(specs).map(([k, s]) => [k, Object.freeze({ dtype: s.dtype, shape: Object.freeze([...s.shape]) })])));
    this.inputs = freeze(bundle.inputs);
    this.outputs = freeze(bundle.outputs);
    this.skipped = [];
    this.stats = { uploads: 0, reads: 0, runs: 0, dispatches: 0, constants: constants.length, compileMs, loadMs: 0, lastRunMs: 0 };
    this._target = target;
    this._rt = rt;
    this._ctx = ctx;
    this._compiled = compiled;
    this._constants = constants;
    this._life = lifetimes(target);
    this._queue = Promise.resolve();
    this._disposed = false;
  }

  // One run on zeros: the first real run then finds every pipeline compiled and every buffer made.
  async warmup() {
    const zeros = {};
    for (const [k, s] of Object.entries(this.inputs)) zeros[k] = new ARRAYS[s.dtype](s.shape.reduce((a, b) => a * b, 1));
    await this.run(zeros);
  }

  _check(inputs) {
    if (this._disposed) throw new Error("jaxcore-web: the model was disposed");
    if (!inputs || typeof inputs !== "object") throw new Error("jaxcore-web: run() takes an object of typed arrays by input name");
    const names = Object.keys(this.inputs);
    for (const k of Object.keys(inputs)) {
      if (!(k in this.inputs)) throw new Error(`jaxcore-web: unknown input ${JSON.stringify(k)} (the model takes: ${names.join(", ")})`);
    }
    for (const [k, spec] of Object.entries(this.inputs)) {
      const x = inputs[k];
      const want = ARRAYS[spec.dtype];
      if (x === undefined) throw new Error(`jaxcore-web: input ${JSON.stringify(k)} is missing: expected a ${describe(spec)}`);
      const got = x === null ? "null" : ArrayBuffer.isView(x) ? x.constructor.name : typeof x === "object" ? (x.constructor && x.constructor.name) || "object" : typeof x;
      if (got !== want.name) throw new Error(`jaxcore-web: input ${JSON.stringify(k)}: expected a ${describe(spec)}, got ${got}`);
      const n = spec.shape.reduce((a, b) => a * b, 1);
      if (x.length !== n) throw new Error(`jaxcore-web: input ${JSON.stringify(k)}: expected a ${describe(spec)}, got ${x.length} elements`);
    }
  }

  // {name: typed array} -> Promise<{name: typed array}>; runs are queued, one at a time.
  run(inputs) {
    try {
      this._check(inputs);
    } catch (e) {
      return Promise.reject(e);
    }
    const result = this._queue.then(() => this._run(inputs));
    this._queue = result.catch(() => undefined);
    return result;
  }

  async _run(inputs) {
    if (this._disposed) throw new Error("jaxcore-web: the model was disposed");
    const t0 = performance.now();
    const { _rt: rt, _ctx: ctx, _target: target, stats } = this;
    const vals = new Array(target.values.length).fill(null);
    for (const [v, buf] of this._constants) vals[v] = buf;
    const release = (v) => {
      if (vals[v] !== null) rt.free(ctx, vals[v]);
      vals[v] = null;
    };
    let failure = null;
    let out = null;
    rt.begin(ctx);
    try {
      for (const [k, v] of Object.entries(target.inputs)) {
        const x = inputs[k];
        vals[v] = rt.upload(ctx, new Uint8Array(x.buffer, x.byteOffset, x.byteLength));
        stats.uploads++;
      }
      this._life.early.forEach(release);
      target.steps.forEach((s, i) => {
        const outs = rt.dispatch(ctx, this._compiled[s.program], s.inputs.map((v) => vals[v]));
        s.outputs.forEach((v, j) => (vals[v] = outs[j]));
        stats.dispatches++;
        this._life.frees[i].forEach(release);
      });
      const names = Object.keys(target.outputs);
      const reads = names.map((k) => rt.read(ctx, vals[target.outputs[k]], target.values[target.outputs[k]]));
      stats.reads += reads.length;
      names.forEach((k) => release(target.outputs[k]));
      const bytes = await Promise.all(reads);
      out = {};
      names.forEach((k, i) => {
        const A = ARRAYS[this.outputs[k].dtype];
        const b = bytes[i].byteOffset % A.BYTES_PER_ELEMENT ? bytes[i].slice() : bytes[i];
        out[k] = new A(b.buffer, b.byteOffset, b.byteLength / A.BYTES_PER_ELEMENT);
      });
    } catch (e) {
      failure = e;
    }
    const constants = new Set(this._constants.map(([v]) => v));
    vals.forEach((_, v) => constants.has(v) || release(v));
    try {
      await rt.end(ctx);
    } catch (e) {
      failure = failure || e;
    }
    if (failure) throw new Error(`jaxcore-web: the run on ${this.device} failed: ${message(failure)}`);
    stats.runs++;
    stats.lastRunMs = performance.now() - t0;
    return out;
  }

  dispose() {
    if (this._disposed) return;
    this._disposed = true;
    for (const [, buf] of this._constants) this._rt.free(this._ctx, buf);
    this._rt.close(this._ctx, this._compiled);
  }
}
