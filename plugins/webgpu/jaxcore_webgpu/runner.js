// jaxcore-webgpu runner: executes programs exported by jaxcore_webgpu.export in a web page.
//
//   <script src="runner.js"></script>
//   const device = await JaxcoreWebGPU.requestDevice();
//   const prog = await JaxcoreWebGPU.compile(device, program);   // program: the exported JSON
//   if (prog.unsupported) throw new Error(prog.unsupported);
//   const [out] = await prog.run([new Uint8Array(inputBytes)]);  // Uint8Array per output
//
// or in one call: `await JaxcoreWebGPU.run(program, inputs)`. Plain JavaScript, no build step and
// no dependencies; it needs WebGPU (a secure context: https:// or file://, not about:blank).
// `prog.messages` holds what the browser's shader compiler said (getCompilationInfo) and any
// validation error from building the pipelines; `prog.ok` is false when one of them is an error.
//
// This file is an ES module (jaxcore.web bundles it as webgpu.js); the classic script above, which
// defines the global JaxcoreWebGPU, is derived from it (jaxcore_webgpu.export.runner_js). Besides
// the one-program API it is a device runtime of jaxcore-web's index.js, which drives a recorded
// pipeline through: open, unsupported, compileAll, upload, dispatch, read, free, begin, end, close.
// A pipeline's buffers stay on the GPU, pooled by size across runs; its dispatches are encoded into
// one command encoder, submitted at the first read.

export const FORMAT = "jaxcore-webgpu-program";
export const NAME = "webgpu";
const MIN_BINDING = 16;
// The limits the exported shaders were sized by live on the adapter; ask for all it has.
const LIMITS = [
  "maxStorageBufferBindingSize",
  "maxBufferSize",
  "maxStorageBuffersPerShaderStage",
  "maxComputeWorkgroupStorageSize",
  "maxComputeInvocationsPerWorkgroup",
  "maxComputeWorkgroupSizeX",
  "maxComputeWorkgroupSizeY",
  "maxComputeWorkgroupSizeZ",
  "maxComputeWorkgroupsPerDimension",
];
const FEATURES = ["shader-f16", "subgroups"];

export function bufferBytes(n) {
  return Math.max(MIN_BINDING, Math.ceil(n / 4) * 4);
}

function base64Bytes(s) {
  const bin = atob(s);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

function asBytes(x) {
  if (x instanceof Uint8Array) return x;
  if (ArrayBuffer.isView(x)) return new Uint8Array(x.buffer, x.byteOffset, x.byteLength);
  if (x instanceof ArrayBuffer) return new Uint8Array(x);
  throw new TypeError("an input must be an ArrayBuffer or a typed array");
}

export async function requestDevice(options) {
  if (typeof navigator === "undefined" || !navigator.gpu) {
    throw new Error(
      "WebGPU is not available: navigator.gpu is missing (it needs a secure context, " +
        "https:// or file://, and a browser with WebGPU enabled)"
    );
  }
  const adapter = await navigator.gpu.requestAdapter(options || {});
  if (!adapter) throw new Error("WebGPU: no adapter (navigator.gpu.requestAdapter returned null)");
  const requiredFeatures = FEATURES.filter((f) => adapter.features.has(f));
  const requiredLimits = {};
  for (const k of LIMITS) if (adapter.limits[k] !== undefined) requiredLimits[k] = adapter.limits[k];
  const device = await adapter.requestDevice({ requiredFeatures, requiredLimits });
  device.jaxcoreAdapterInfo = adapter.info || null;
  return device;
}

// Why this device cannot run `program` (a sentence), or null.
export function unsupported(device, program) {
  check(program);
  for (const r of program.requires || []) {
    return `the program needs ${r}, which WebGPU does not have`;
  }
  for (const f of program.features || []) {
    if (!device.features.has(f)) return `the program needs the WebGPU feature '${f}', which this adapter lacks`;
  }
  for (const [k, v] of Object.entries(program.limits || {})) {
    const have = device.limits[k];
    if (have !== undefined && v > have) return `the program needs ${k} = ${v}, which exceeds this adapter's ${have}`;
  }
  return null;
}

function check(program) {
  if (!program || program.format !== FORMAT) {
    throw new Error(`not a ${FORMAT} (format: ${program && program.format})`);
  }
  if (program.version !== 1) throw new Error(`${FORMAT} version ${program.version} is not supported`);
}

export async function compile(device, program) {
  check(program);
  const why = unsupported(device, program);
  if (why) return { program, unsupported: why, ok: false, messages: [] };
  const messages = [];
  const modules = program.shaders.map((code) => device.createShaderModule({ code }));
  await Promise.all(
    modules.map(async (m, i) => {
      const info = await m.getCompilationInfo();
      for (const msg of info.messages) {
        messages.push({ shader: i, type: msg.type, line: msg.lineNum, column: msg.linePos, message: msg.message });
      }
    })
  );
  device.pushErrorScope("validation");
  const passes = await Promise.all(
    program.passes.map(async (p, i) => {
      const layout0 = device.createBindGroupLayout({
        entries: p.bindings.map((b) => ({
          binding: b.binding,
          visibility: GPUShaderStage.COMPUTE,
          buffer: { type: b.type },
        })),
      });
      const layouts = [layout0];
      let uniformGroup = null;
      if (p.uniform) {
        const data = base64Bytes(p.uniform);
        const ubuf = device.createBuffer({
          size: bufferBytes(data.byteLength),
          usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST,
        });
        device.queue.writeBuffer(ubuf, 0, data);
        const layout1 = device.createBindGroupLayout({
          entries: [{ binding: 0, visibility: GPUShaderStage.COMPUTE, buffer: { type: "uniform" } }],
        });
        layouts.push(layout1);
        uniformGroup = device.createBindGroup({
          layout: layout1,
          entries: [{ binding: 0, resource: { buffer: ubuf } }],
        });
      }
      let pipeline = null;
      try {
        pipeline = await device.createComputePipelineAsync({
          layout: device.createPipelineLayout({ bindGroupLayouts: layouts }),
          compute: { module: modules[p.shader], entryPoint: p.entry },
        });
      } catch (e) {
        messages.push({ pass: i, type: "error", message: `pipeline: ${e.message || e}` });
      }
      return { pipeline, layout0, uniformGroup, spec: p };
    })
  );
  const err = await device.popErrorScope();
  if (err) messages.push({ type: "error", message: `validation: ${err.message}` });
  const ok = !messages.some((m) => m.type === "error");
  const compiled = { program, device, passes, messages, ok, unsupported: null, scratch: null };
  compiled.run = (inputs) => runCompiled(compiled, inputs);
  return compiled;
}

export function compileAll(device, programs) {
  return Promise.all(programs.map((p) => compile(device, p)));
}

const STORAGE = () => GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST;

// The program's dispatches into the compute pass `cpass`; `sets` holds the in/out/scratch buffers.
function encodePasses(compiled, sets, cpass) {
  const device = compiled.device;
  for (const p of compiled.passes) {
    const g = p.spec.grid;
    if (!(g[0] && g[1] && g[2])) continue;
    const group = device.createBindGroup({
      layout: p.layout0,
      entries: p.spec.bindings.map((b) => ({
        binding: b.binding,
        resource: { buffer: sets[b.buffer[0]][b.buffer[1]] },
      })),
    });
    cpass.setPipeline(p.pipeline);
    cpass.setBindGroup(0, group);
    if (p.uniformGroup) cpass.setBindGroup(1, p.uniformGroup);
    cpass.dispatchWorkgroups(g[0], g[1], g[2]);
  }
}

// Record the program's dispatches and output copies into `encoder`; returns what to read back.
function encode(compiled, inputs, encoder, owned) {
  const { program, device } = compiled;
  if (inputs.length !== program.inputs.length) {
    throw new Error(`the program takes ${program.inputs.length} inputs, got ${inputs.length}`);
  }
  const sets = { in: [], out: [], scratch: [] };
  const fresh = (size, kind) => {
    const buf = device.createBuffer({ size, usage: STORAGE() });
    owned.push(buf);
    sets[kind].push(buf);
  };
  inputs.forEach((x, i) => {
    const bytes = asBytes(x);
    const need = program.inputs[i].bytes;
    if (bytes.byteLength < need) throw new Error(`input ${i} has ${bytes.byteLength} bytes; ${need} are needed`);
    const size = bufferBytes(bytes.byteLength);
    const buf = device.createBuffer({ size, usage: STORAGE(), mappedAtCreation: true });
    new Uint8Array(buf.getMappedRange()).set(bytes);
    buf.unmap();
    owned.push(buf);
    sets.in.push(buf);
  });
  for (const o of program.outputs) fresh(bufferBytes(o.bytes), "out");
  for (const n of program.scratch) fresh(bufferBytes(n), "scratch");
  const cpass = encoder.beginComputePass();
  encodePasses(compiled, sets, cpass);
  cpass.end();
  return program.outputs.map((o, i) => {
    const size = bufferBytes(o.bytes);
    const staging = device.createBuffer({ size, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
    owned.push(staging);
    encoder.copyBufferToBuffer(sets.out[i], 0, staging, 0, size);
    return { staging, bytes: o.bytes };
  });
}

async function readBack(reads) {
  return Promise.all(
    reads.map(async ({ staging, bytes }) => {
      await staging.mapAsync(GPUMapMode.READ);
      const out = new Uint8Array(staging.getMappedRange().slice(0, bytes));
      staging.unmap();
      return out;
    })
  );
}

async function runCompiled(compiled, inputs) {
  if (compiled.unsupported) throw new Error(compiled.unsupported);
  if (!compiled.ok) throw new Error("the program did not compile: " + JSON.stringify(compiled.messages));
  const device = compiled.device;
  const owned = [];
  device.pushErrorScope("validation");
  try {
    const encoder = device.createCommandEncoder();
    const reads = encode(compiled, inputs, encoder, owned);
    device.queue.submit([encoder.finish()]);
    const err = await device.popErrorScope();
    if (err) throw new Error(`WebGPU validation: ${err.message}`);
    return await readBack(reads);
  } finally {
    for (const b of owned) b.destroy();
  }
}

// Many programs on one device: compile them all, run them all in one submit, read them all.
// jobs: [{program, inputs}]; returns [{outputs, messages, ok, unsupported, error}] in order.
export async function runMany(device, jobs) {
  const compiled = await Promise.all(
    jobs.map(async (j) => {
      try {
        return await compile(device, j.program);
      } catch (e) {
        return { ok: false, messages: [], error: String((e && e.message) || e) };
      }
    })
  );
  const owned = [];
  const encoder = device.createCommandEncoder();
  const reads = [];
  const errors = [];
  for (let i = 0; i < jobs.length; i++) {
    const c = compiled[i];
    reads.push(null);
    errors.push(c.error || null);
    if (c.unsupported || !c.ok || c.error) continue;
    device.pushErrorScope("validation");
    try {
      reads[i] = encode(c, jobs[i].inputs, encoder, owned);
    } catch (e) {
      errors[i] = String((e && e.message) || e);
    }
    const err = await device.popErrorScope();
    if (err) {
      errors[i] = `WebGPU validation: ${err.message}`;
      reads[i] = null;
    }
  }
  device.pushErrorScope("validation");
  device.queue.submit([encoder.finish()]);
  const submitErr = await device.popErrorScope();
  if (submitErr) {
    // One bad program spoils the shared encoder: run each on its own to tell which.
    for (const b of owned) b.destroy();
    return Promise.all(
      jobs.map(async (j, i) => {
        const c = compiled[i];
        const base = { messages: c.messages || [], unsupported: c.unsupported || null };
        if (c.unsupported || !c.ok || c.error || errors[i]) {
          return { ...base, outputs: null, ok: false, error: c.error || errors[i] || null };
        }
        try {
          return { ...base, outputs: await runCompiled(c, j.inputs), ok: true, error: null };
        } catch (e) {
          return { ...base, outputs: null, ok: false, error: String((e && e.message) || e) };
        }
      })
    );
  }
  const results = [];
  try {
    for (let i = 0; i < jobs.length; i++) {
      const c = compiled[i];
      let outputs = null;
      if (reads[i]) outputs = await readBack(reads[i]);
      results.push({
        outputs,
        messages: c.messages || [],
        ok: !!c.ok && !errors[i],
        unsupported: c.unsupported || null,
        error: errors[i] || null,
      });
    }
  } finally {
    for (const b of owned) b.destroy();
  }
  return results;
}

export async function run(program, inputs, device) {
  device = device || (await requestDevice());
  const compiled = await compile(device, program);
  return runCompiled(compiled, inputs);
}

// ---- the device runtime of a recorded pipeline (jaxcore-web's index.js) ----------------------
// ctx is the GPUDevice; its pools live beside it: free storage and staging buffers by size, every
// buffer made here, the command encoder not yet submitted, and how many opened it (the pools and a
// device the runtime opened itself go when the last closes).
const STATE = new WeakMap();

function stateOf(device) {
  let st = STATE.get(device);
  if (!st) {
    st = { free: new Map(), staging: new Map(), owned: new Set(), encoder: null, submit: null, users: 0 };
    STATE.set(device, st);
  }
  return st;
}

function take(device, pool, size, usage) {
  const st = stateOf(device);
  const list = st[pool].get(size);
  if (list && list.length) return list.pop();
  const buf = device.createBuffer({ size, usage });
  st.owned.add(buf);
  return buf;
}

function give(device, pool, buf) {
  const map = stateOf(device)[pool];
  if (!map.has(buf.size)) map.set(buf.size, []);
  map.get(buf.size).push(buf);
}

function flush(device) {
  const st = stateOf(device);
  if (st.encoder) device.queue.submit([st.encoder.finish()]);
  st.encoder = null;
}

// A device of its own (options.adapter: requestAdapter's options), or options.device as given
// (shared: close leaves it, and frees what the runtime made on it once its last user closes).
export async function open(options) {
  let device = options && options.device;
  if (!device) {
    device = await requestDevice(options && options.adapter);
    device.jaxcoreOpened = true;
  }
  stateOf(device).users++;
  return device;
}

// A GPU buffer holding `bytes` (written through the queue, after the work encoded so far).
export function upload(device, bytes) {
  let data = asBytes(bytes);
  if (data.byteLength % 4) {
    const padded = new Uint8Array(Math.ceil(data.byteLength / 4) * 4);
    padded.set(data);
    data = padded;
  }
  flush(device);
  const buf = take(device, "free", bufferBytes(data.byteLength), STORAGE());
  if (data.byteLength) device.queue.writeBuffer(buf, 0, data);
  return buf;
}

// Encode one run of `compiled` on GPU buffers; returns its fresh output buffers. (No exported
// program writes its inputs, so they are bound as they are; scratch is the compiled program's own.)
export function dispatch(device, compiled, inBufs) {
  const program = compiled.program;
  if (!compiled.ok) throw new Error(compiled.unsupported || "the program did not compile");
  if (inBufs.length !== program.inputs.length) {
    throw new Error(`the program takes ${program.inputs.length} inputs, got ${inBufs.length}`);
  }
  inBufs.forEach((b, i) => {
    if (b.size < program.inputs[i].bytes) throw new Error(`input ${i} has ${b.size} bytes; ${program.inputs[i].bytes} are needed`);
  });
  const out = program.outputs.map((o) => take(device, "free", bufferBytes(o.bytes), STORAGE()));
  if (!compiled.scratch) compiled.scratch = program.scratch.map((n) => take(device, "free", bufferBytes(n), STORAGE()));
  const st = stateOf(device);
  if (!st.encoder) st.encoder = device.createCommandEncoder();
  const cpass = st.encoder.beginComputePass();
  encodePasses(compiled, { in: inBufs, out, scratch: compiled.scratch }, cpass);
  cpass.end();
  return out;
}

// The first `nbytes` of `buf`: a copy into a pooled staging buffer, submitted with the work before it
// (reads issued together share one submit, made once the caller's synchronous code is done).
export async function read(device, buf, nbytes) {
  const size = bufferBytes(nbytes);
  const staging = take(device, "staging", size, GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST);
  const st = stateOf(device);
  if (!st.encoder) st.encoder = device.createCommandEncoder();
  st.encoder.copyBufferToBuffer(buf, 0, staging, 0, size);
  if (!st.submit) st.submit = Promise.resolve().then(() => ((st.submit = null), flush(device)));
  await st.submit;
  await staging.mapAsync(GPUMapMode.READ, 0, size);
  const out = new Uint8Array(staging.getMappedRange(0, size).slice(0, nbytes));
  staging.unmap();
  give(device, "staging", staging);
  return out;
}

export function free(device, buf) {
  give(device, "free", buf);
}

export function begin(device) {
  device.pushErrorScope("validation");
}

export async function end(device) {
  flush(device);
  const err = await device.popErrorScope();
  if (err) throw new Error(`WebGPU validation: ${err.message}`);
}

// `compiled`: the closing user's programs, whose scratch buffers go back to the pool.
export function close(device, compiled) {
  for (const c of compiled || []) for (const b of c.scratch || []) free(device, b);
  const st = stateOf(device);
  if (--st.users > 0) return;
  flush(device);
  for (const b of st.owned) b.destroy();
  STATE.delete(device);
  if (device.jaxcoreOpened) device.destroy();
}
