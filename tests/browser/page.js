// The parity page's side: batches of exported programs in, output bytes and compiler messages out.
// Bytes travel as base64 (page.evaluate speaks JSON). Loaded after both plugins' runner.js.
(function (root) {
  "use strict";

  function decode(b64) {
    const bin = atob(b64);
    const out = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
    return out;
  }

  function encode(bytes) {
    let s = "";
    const step = 0x8000;
    for (let i = 0; i < bytes.length; i += step) s += String.fromCharCode.apply(null, bytes.subarray(i, i + step));
    return btoa(s);
  }

  const state = { device: null, gl: null, lost: null };

  async function webgpuDevice() {
    if (!state.device) {
      state.device = await JaxcoreWebGPU.requestDevice();
      state.device.lost.then((info) => (state.lost = `${info.reason}: ${info.message}`));
      state.device.onuncapturederror = (e) => (state.uncaptured = e.error.message);
    }
    return state.device;
  }

  function pack(r) {
    return { ...r, outputs: r.outputs ? r.outputs.map(encode) : null };
  }

  async function info() {
    const out = { webgpu: null, webgl: null };
    try {
      const d = await webgpuDevice();
      const a = d.jaxcoreAdapterInfo || {};
      out.webgpu = {
        vendor: a.vendor,
        architecture: a.architecture,
        description: a.description,
        features: [...d.features].sort(),
        maxStorageBuffersPerShaderStage: d.limits.maxStorageBuffersPerShaderStage,
        maxComputeInvocationsPerWorkgroup: d.limits.maxComputeInvocationsPerWorkgroup,
        maxStorageBufferBindingSize: d.limits.maxStorageBufferBindingSize,
      };
    } catch (e) {
      out.webgpu = { error: String((e && e.message) || e) };
    }
    try {
      if (!state.gl) state.gl = JaxcoreWebGL.createContext();
      const gl = state.gl;
      const dbg = gl.getExtension("WEBGL_debug_renderer_info");
      out.webgl = {
        renderer: dbg ? gl.getParameter(dbg.UNMASKED_RENDERER_WEBGL) : gl.getParameter(gl.RENDERER),
        version: gl.getParameter(gl.VERSION),
        maxTextureSize: gl.getParameter(gl.MAX_TEXTURE_SIZE),
        colorBufferFloat: !!gl.getExtension("EXT_color_buffer_float"),
      };
    } catch (e) {
      out.webgl = { error: String((e && e.message) || e) };
    }
    return out;
  }

  async function webgpu(jobs) {
    const device = await webgpuDevice();
    const results = await JaxcoreWebGPU.runMany(
      device,
      jobs.map((j) => ({ program: j.program, inputs: j.inputs.map(decode) }))
    );
    return { results: results.map(pack), lost: state.lost, uncaptured: state.uncaptured || null };
  }

  function webgl(jobs) {
    if (!state.gl) state.gl = JaxcoreWebGL.createContext();
    const gl = state.gl;
    const results = JaxcoreWebGL.runMany(
      gl,
      jobs.map((j) => ({ program: j.program, inputs: j.inputs.map(decode) }))
    );
    return { results: results.map(pack), lost: gl.isContextLost() ? "context lost" : null };
  }

  root.jaxcoreParity = { info, webgpu, webgl };
})(globalThis);
