// jaxcore-webgl runner: executes programs exported by jaxcore_webgl.export in a web page.
//
//   <script src="runner.js"></script>
//   const gl = JaxcoreWebGL.createContext();                  // or pass your own WebGL2 context
//   const prog = JaxcoreWebGL.compile(gl, program);            // program: the exported JSON
//   if (!prog.ok) throw new Error(JSON.stringify(prog.messages));
//   const [out] = prog.run([new Uint8Array(inputBytes)]);      // Uint8Array per output
//
// or in one call: `JaxcoreWebGL.run(program, inputs)`. Plain JavaScript, no build step and no
// dependencies; it needs WebGL2. Buffers are RGBA32UI textures holding raw bytes (16 per texel),
// so every bit pattern of int32, uint32, float32 and float16 data survives. `prog.messages` holds
// every non-empty shader and program info log (ANGLE reports warnings there), and link errors.
//
// This file is an ES module (jaxcore.web bundles it as webgl.js); the classic script above, which
// defines the global JaxcoreWebGL, is derived from it (jaxcore_webgl.export.runner_js). Besides the
// one-program API it is a device runtime of jaxcore-web's index.js, which drives a recorded
// pipeline through: open, unsupported, compileAll, upload, dispatch, read, free, begin, end, close.
// A pipeline's textures stay on the GPU, pooled by dimensions across runs.

export const FORMAT = "jaxcore-webgl-program";
export const NAME = "webgl";
const TEXEL_BYTES = 16;

export function createContext(canvas) {
  canvas =
    canvas ||
    (typeof OffscreenCanvas !== "undefined" ? new OffscreenCanvas(1, 1) : document.createElement("canvas"));
  const gl = canvas.getContext("webgl2", { antialias: false, depth: false, stencil: false, alpha: true });
  if (!gl) throw new Error("WebGL2 is not available (getContext('webgl2') returned null)");
  gl.getExtension("EXT_color_buffer_float"); // not needed for RGBA32UI, but as the plugin asks for it
  gl.disable(gl.BLEND);
  gl.disable(gl.DITHER);
  gl.disable(gl.DEPTH_TEST);
  gl.disable(gl.SCISSOR_TEST);
  gl.pixelStorei(gl.PACK_ALIGNMENT, 4);
  gl.pixelStorei(gl.UNPACK_ALIGNMENT, 4);
  return gl;
}

// (width, height, log2 width) for a buffer of `nbytes`, as jaxcore_webgl.device.texture_dims.
export function textureDims(nbytes, maxSize) {
  const texels = Math.max(1, Math.ceil(nbytes / TEXEL_BYTES));
  let w = 1;
  if (texels > 1) {
    let r = Math.floor(Math.sqrt(texels - 1)); // isqrt(texels - 1), exact
    while (r * r > texels - 1) r--;
    while ((r + 1) * (r + 1) <= texels - 1) r++;
    w = 2 ** Math.max(0, Math.ceil(Math.log2(r + 1)));
  }
  w = Math.min(w, maxSize);
  const h = Math.ceil(texels / w);
  if (h > maxSize) throw new Error(`a buffer of ${nbytes} bytes needs ${w}x${h} texels; the limit is ${maxSize}`);
  return [w, h, Math.log2(w)];
}

function asBytes(x) {
  if (x instanceof Uint8Array) return x;
  if (ArrayBuffer.isView(x)) return new Uint8Array(x.buffer, x.byteOffset, x.byteLength);
  if (x instanceof ArrayBuffer) return new Uint8Array(x);
  throw new TypeError("an input must be an ArrayBuffer or a typed array");
}

function check(program) {
  if (!program || program.format !== FORMAT) {
    throw new Error(`not a ${FORMAT} (format: ${program && program.format})`);
  }
  if (program.version !== 1) throw new Error(`${FORMAT} version ${program.version} is not supported`);
}

// One linked program per distinct fragment source, kept on the context. `start` issues the
// compile and link without asking for their status, so many can be in flight (ANGLE compiles in
// parallel with KHR_parallel_shader_compile); `finish` asks, once.
function start(gl, vertexSrc, fragmentSrc) {
  const cache = gl.jaxcorePrograms || (gl.jaxcorePrograms = new Map());
  const key = vertexSrc + "\u0000" + fragmentSrc;
  let entry = cache.get(key);
  if (!entry) {
    const vs = gl.createShader(gl.VERTEX_SHADER);
    gl.shaderSource(vs, vertexSrc);
    gl.compileShader(vs);
    const fs = gl.createShader(gl.FRAGMENT_SHADER);
    gl.shaderSource(fs, fragmentSrc);
    gl.compileShader(fs);
    const prog = gl.createProgram();
    gl.attachShader(prog, vs);
    gl.attachShader(prog, fs);
    gl.linkProgram(prog);
    entry = { prog, vs, fs, messages: null };
    cache.set(key, entry);
  }
  return entry;
}

function finish(gl, entry) {
  if (entry.messages) return entry;
  const own = [];
  for (const [s, label] of [
    [entry.vs, "vertex"],
    [entry.fs, "fragment"],
  ]) {
    const ok = gl.getShaderParameter(s, gl.COMPILE_STATUS);
    const log = (gl.getShaderInfoLog(s) || "").trim();
    if (!ok || log) own.push({ stage: label, type: ok ? "warning" : "error", message: log || "compile failed" });
  }
  const ok = gl.getProgramParameter(entry.prog, gl.LINK_STATUS);
  const log = (gl.getProgramInfoLog(entry.prog) || "").trim();
  if (!ok || log) own.push({ stage: "link", type: ok ? "warning" : "error", message: log || "link failed" });
  gl.deleteShader(entry.vs);
  gl.deleteShader(entry.fs);
  if (!ok) {
    gl.deleteProgram(entry.prog);
    entry.prog = null;
  }
  entry.messages = own;
  return entry;
}

function link(gl, vertexSrc, fragmentSrc, label, messages) {
  const entry = finish(gl, start(gl, vertexSrc, fragmentSrc));
  for (const m of entry.messages) messages.push({ ...m, shader: label });
  return entry.prog;
}

export function compile(gl, program) {
  check(program);
  const messages = [];
  const progs = program.shaders.map((src, i) => link(gl, program.vertex, src, i, messages));
  const ok = progs.every((p) => p) && !messages.some((m) => m.type === "error");
  const compiled = { program, gl, progs, messages, ok, temps: null, locations: new Map() };
  compiled.run = (inputs) => runCompiled(compiled, inputs);
  return compiled;
}

// Every program's shaders in flight first (KHR_parallel_shader_compile), then each compiled.
export async function compileAll(gl, programs) {
  gl.getExtension("KHR_parallel_shader_compile");
  for (const p of programs) for (const src of p.shaders || []) start(gl, p.vertex, src);
  return programs.map((p) => compile(gl, p));
}

function makeTexture(gl, w, h) {
  const tex = gl.createTexture();
  gl.bindTexture(gl.TEXTURE_2D, tex);
  gl.texParameteri(gl.TEXTURE_2D, gl.TEXTURE_MIN_FILTER, gl.NEAREST);
  gl.texParameteri(gl.TEXTURE_2D, gl.TEXTURE_MAG_FILTER, gl.NEAREST);
  gl.texParameteri(gl.TEXTURE_2D, gl.TEXTURE_WRAP_S, gl.CLAMP_TO_EDGE);
  gl.texParameteri(gl.TEXTURE_2D, gl.TEXTURE_WRAP_T, gl.CLAMP_TO_EDGE);
  gl.texStorage2D(gl.TEXTURE_2D, 1, gl.RGBA32UI, w, h);
  const fbo = gl.createFramebuffer();
  gl.bindFramebuffer(gl.FRAMEBUFFER, fbo);
  gl.framebufferTexture2D(gl.FRAMEBUFFER, gl.COLOR_ATTACHMENT0, gl.TEXTURE_2D, tex, 0);
  const status = gl.checkFramebufferStatus(gl.FRAMEBUFFER);
  if (status !== gl.FRAMEBUFFER_COMPLETE) throw new Error(`RGBA32UI framebuffer incomplete (0x${status.toString(16)})`);
  return { tex, fbo, w, h, shift: Math.log2(w) };
}

function deleteTexture(gl, t) {
  gl.deleteFramebuffer(t.fbo);
  gl.deleteTexture(t.tex);
}

function writeTexture(gl, t, data) {
  const full = new Uint8Array(t.w * t.h * TEXEL_BYTES);
  full.set(data);
  gl.bindTexture(gl.TEXTURE_2D, t.tex);
  gl.texSubImage2D(gl.TEXTURE_2D, 0, 0, 0, t.w, t.h, gl.RGBA_INTEGER, gl.UNSIGNED_INT, new Uint32Array(full.buffer));
}

function uniform(compiled, shader, name) {
  const key = `${shader}:${name}`;
  const cache = compiled.locations;
  if (!cache.has(key)) cache.set(key, compiled.gl.getUniformLocation(compiled.progs[shader], name));
  return cache.get(key);
}

// The program's draws, `texs[id]` standing for its texture `id`.
function drawPasses(compiled, texs) {
  const { program, gl, progs } = compiled;
  for (const p of program.passes) {
    gl.useProgram(progs[p.shader]);
    p.inputs.forEach((id, i) => {
      gl.activeTexture(gl.TEXTURE0 + i);
      gl.bindTexture(gl.TEXTURE_2D, texs[id].tex);
      const unit = uniform(compiled, p.shader, `in${i}`);
      if (unit !== null) gl.uniform1i(unit, i);
      const sh = uniform(compiled, p.shader, `sh${i}`);
      if (sh !== null) gl.uniform1i(sh, texs[id].shift);
    });
    for (const [name, v] of Object.entries(p.ints)) {
      const loc = uniform(compiled, p.shader, name);
      if (loc !== null) gl.uniform1i(loc, v);
    }
    const out = texs[p.output];
    let mrt = null;
    if (p.targets) {
      // several render targets: attachment r is texture targets[r]
      mrt = gl.createFramebuffer();
      gl.bindFramebuffer(gl.DRAW_FRAMEBUFFER, mrt);
      p.targets.forEach((id, r) => {
        gl.framebufferTexture2D(gl.DRAW_FRAMEBUFFER, gl.COLOR_ATTACHMENT0 + r, gl.TEXTURE_2D, texs[id].tex, 0);
      });
      gl.drawBuffers(p.targets.map((_, r) => gl.COLOR_ATTACHMENT0 + r));
    } else {
      gl.bindFramebuffer(gl.DRAW_FRAMEBUFFER, out.fbo);
    }
    gl.viewport(0, 0, out.w, Math.ceil(p.texels / out.w));
    gl.drawArrays(gl.TRIANGLES, 0, 3);
    if (mrt) {
      gl.bindFramebuffer(gl.DRAW_FRAMEBUFFER, null);
      gl.deleteFramebuffer(mrt);
    }
    // unbind the units, so a later pass that renders into one of these textures is no feedback loop
    p.inputs.forEach((_, i) => {
      gl.activeTexture(gl.TEXTURE0 + i);
      gl.bindTexture(gl.TEXTURE_2D, null);
    });
  }
}

function readTexture(gl, t, nbytes) {
  const rows = Math.max(1, Math.ceil(Math.ceil(nbytes / TEXEL_BYTES) / t.w));
  const px = new Uint32Array(t.w * rows * 4);
  gl.bindFramebuffer(gl.READ_FRAMEBUFFER, t.fbo);
  gl.readPixels(0, 0, t.w, rows, gl.RGBA_INTEGER, gl.UNSIGNED_INT, px);
  return new Uint8Array(px.buffer, 0, nbytes).slice();
}

function runCompiled(compiled, inputs) {
  const { program, gl } = compiled;
  if (!compiled.ok) throw new Error("the program did not compile: " + JSON.stringify(compiled.messages));
  if (inputs.length !== program.inputs.length) {
    throw new Error(`the program takes ${program.inputs.length} inputs, got ${inputs.length}`);
  }
  const maxSize = gl.getParameter(gl.MAX_TEXTURE_SIZE);
  const texs = [];
  try {
    for (const t of program.textures) {
      let w = t.width;
      let h = t.height;
      let data = null;
      if (t.role === "in") {
        data = asBytes(inputs[t.index]);
        const need = program.inputs[t.index].bytes;
        if (data.byteLength < need) throw new Error(`input ${t.index} has ${data.byteLength} bytes; ${need} are needed`);
        [w, h] = textureDims(data.byteLength, maxSize);
      } else if (w > maxSize || h > maxSize) {
        throw new Error(`texture ${t.id} is ${w}x${h}; this context's MAX_TEXTURE_SIZE is ${maxSize}`);
      }
      const tx = makeTexture(gl, w, h);
      texs[t.id] = tx;
      if (data) writeTexture(gl, tx, data);
    }
    drawPasses(compiled, texs);
    const results = program.outputs.map((o) => readTexture(gl, texs[o.texture], o.bytes));
    const err = gl.getError();
    if (err !== gl.NO_ERROR) throw new Error(`WebGL error 0x${err.toString(16)} while running the program`);
    return results;
  } finally {
    for (const t of texs) if (t) deleteTexture(gl, t);
  }
}

// Many programs on one context: [{program, inputs}] -> [{outputs, messages, ok, error}].
export function runMany(gl, jobs) {
  gl.getExtension("KHR_parallel_shader_compile");
  for (const j of jobs) {
    try {
      for (const src of j.program.shaders) start(gl, j.program.vertex, src);
    } catch (e) {
      // reported by compile() below
    }
  }
  return jobs.map((j) => {
    let c = null;
    try {
      c = compile(gl, j.program);
      if (!c.ok) return { outputs: null, messages: c.messages, ok: false, error: null };
      return { outputs: runCompiled(c, j.inputs), messages: c.messages, ok: true, error: null };
    } catch (e) {
      return { outputs: null, messages: c ? c.messages : [], ok: false, error: String((e && e.message) || e) };
    }
  });
}

export function run(program, inputs, gl) {
  gl = gl || createContext();
  return runCompiled(compile(gl, program), inputs);
}

// ---- the device runtime of a recorded pipeline (jaxcore-web's index.js) ----------------------
// ctx is the WebGL2 context; its pool lives beside it: free textures by dimensions, every texture
// made here, and how many opened it (the pool, and a context the runtime made itself with its
// linked programs, go when the last closes). GL orders its command stream, so a freed texture can be drawn
// into by the next dispatch.
function poolOf(gl) {
  return gl.jaxcorePool || (gl.jaxcorePool = { free: new Map(), owned: new Set(), users: 0 });
}

function take(gl, w, h) {
  const pool = poolOf(gl);
  const list = pool.free.get(`${w}x${h}`);
  if (list && list.length) return list.pop();
  const t = makeTexture(gl, w, h);
  pool.owned.add(t);
  return t;
}

// A context of its own (on options.canvas, if given), or options.gl as given (shared: close leaves
// it, and frees what the runtime made on it once its last user closes).
export function open(options) {
  let gl = options && options.gl;
  if (!gl) {
    gl = createContext(options && options.canvas);
    gl.jaxcoreOpened = true;
  }
  poolOf(gl).users++;
  return gl;
}

export function unsupported(gl, program) {
  check(program);
  const max = gl.getParameter(gl.MAX_TEXTURE_SIZE);
  for (const t of program.textures) {
    if (t.role !== "in" && (t.width > max || t.height > max)) {
      return `texture ${t.id} is ${t.width}x${t.height}; this context's MAX_TEXTURE_SIZE is ${max}`;
    }
  }
  return null;
}

export function upload(gl, bytes) {
  const data = asBytes(bytes);
  const [w, h] = textureDims(data.byteLength, gl.getParameter(gl.MAX_TEXTURE_SIZE));
  const t = take(gl, w, h);
  writeTexture(gl, t, data);
  return t;
}

// Draw one run of `compiled` on textures; returns its fresh output textures. (No exported program
// draws into its inputs; its temporaries are the compiled program's own.)
export function dispatch(gl, compiled, inBufs) {
  const program = compiled.program;
  if (!compiled.ok) throw new Error("the program did not compile: " + JSON.stringify(compiled.messages));
  if (inBufs.length !== program.inputs.length) {
    throw new Error(`the program takes ${program.inputs.length} inputs, got ${inBufs.length}`);
  }
  const temps = compiled.temps || (compiled.temps = []);
  const texs = [];
  for (const t of program.textures) {
    if (t.role === "in") {
      const b = inBufs[t.index];
      const need = program.inputs[t.index].bytes;
      if (b.w * b.h * TEXEL_BYTES < need) throw new Error(`input ${t.index} holds less than the ${need} bytes needed`);
      texs[t.id] = b;
    } else if (t.role === "out") {
      texs[t.id] = take(gl, t.width, t.height);
    } else {
      texs[t.id] = temps[t.id] || (temps[t.id] = take(gl, t.width, t.height));
    }
  }
  drawPasses(compiled, texs);
  return program.outputs.map((o) => texs[o.texture]);
}

export async function read(gl, t, nbytes) {
  return readTexture(gl, t, nbytes);
}

export function free(gl, t) {
  const map = poolOf(gl).free;
  const key = `${t.w}x${t.h}`;
  if (!map.has(key)) map.set(key, []);
  map.get(key).push(t);
}

export function begin(gl) {
  gl.getError(); // a stale error is not this run's
}

export async function end(gl) {
  const err = gl.getError();
  if (err !== gl.NO_ERROR) throw new Error(`WebGL error 0x${err.toString(16)} while running the pipeline`);
}

// `compiled`: the closing user's programs, whose temporary textures go back to the pool.
export function close(gl, compiled) {
  for (const c of compiled || []) for (const t of c.temps || []) if (t) free(gl, t);
  const pool = poolOf(gl);
  if (--pool.users > 0) return;
  for (const t of pool.owned) deleteTexture(gl, t);
  gl.jaxcorePool = null;
  if (!gl.jaxcoreOpened) return; // a context given keeps its linked programs (compile's cache)
  for (const entry of (gl.jaxcorePrograms || new Map()).values()) if (entry.prog) gl.deleteProgram(entry.prog);
  gl.jaxcorePrograms = null;
  const lose = gl.getExtension("WEBGL_lose_context");
  if (lose) lose.loseContext();
}
