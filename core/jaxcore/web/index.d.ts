// Types of jaxcore-web's index.js: load a bundle written by jaxcore.web.write_bundle and run it.

/** The dtypes a bundle's inputs and outputs may have. */
export type DTypeName = "float32" | "int32" | "uint32" | "bool" | "float16" | "float64";

/** The typed array of each dtype: bool is 4-byte int32 0/1, float16 raw halves. */
export interface ArrayOf {
  float32: Float32Array;
  int32: Int32Array;
  uint32: Uint32Array;
  bool: Int32Array;
  float16: Uint16Array;
  float64: Float64Array;
}

export type TypedArray = ArrayOf[DTypeName];

/** A named input or output: its dtype and shape (row-major). */
export interface TensorInfo {
  readonly dtype: DTypeName;
  readonly shape: readonly number[];
}

/** Which target to run: "auto" tries the bundle's targets in order and takes the first that works. */
export type DeviceChoice = "auto" | "webgpu" | "webgl" | (string & {});

export interface LoadOptions {
  device?: DeviceChoice;
  /** The constants (the bundle's .bin): bytes, or a URL; default: the bundle's `binary`, beside it. */
  binary?: ArrayBuffer | ArrayBufferView | string | URL;
  /** Where a bundle given as an object resolves `binary` from (default: the page's URL). */
  baseUrl?: string | URL;
  /** Options for the WebGPU runtime's open(): `adapter` (requestAdapter options) or a `device`. */
  webgpu?: { adapter?: unknown; device?: unknown };
  /** Options for the WebGL runtime's open(): a `canvas` to take the context from, or a `gl`. */
  webgl?: { canvas?: unknown; gl?: unknown };
  [device: string]: unknown;
}

/** Counters a test can pin: one upload per input and one read per output per run (warmup is a run). */
export interface Stats {
  uploads: number;
  reads: number;
  runs: number;
  dispatches: number;
  /** Constant buffers uploaded at load (once). */
  constants: number;
  compileMs: number;
  loadMs: number;
  lastRunMs: number;
}

/** A target that "auto" passed over, and why. */
export interface Skipped {
  device: string;
  reason: string;
}

export interface Model {
  readonly name: string;
  /** The target it runs on ("webgpu", "webgl", ...). */
  readonly device: string;
  readonly inputs: Readonly<Record<string, TensorInfo>>;
  readonly outputs: Readonly<Record<string, TensorInfo>>;
  readonly stats: Readonly<Stats>;
  readonly skipped: readonly Skipped[];
  /** One run on zeros, so that the first real run is fast. */
  warmup(): Promise<void>;
  /** Inputs by name, each the dtype's typed array of exactly its shape's size; outputs by name. */
  run(inputs: Record<string, TypedArray>): Promise<Record<string, TypedArray>>;
  dispose(): void;
}

/** A bundle as write_bundle writes it (model.json). */
export interface Bundle {
  format: "jaxcore-web-bundle";
  version: 1;
  name: string;
  binary: string;
  binaryBytes: number;
  inputs: Record<string, TensorInfo>;
  outputs: Record<string, TensorInfo>;
  targets: Target[];
}

export interface Target {
  device: string;
  runtime: string;
  values: number[];
  inputs: Record<string, number>;
  outputs: Record<string, number>;
  constants: { value: number; offset: number; length: number }[];
  programs: Record<string, unknown>[];
  steps: { program: number; inputs: number[]; outputs: number[] }[];
}

/** Load a bundle (its URL, or the parsed JSON) on the first target that runs here. */
export function load(source: string | URL | Bundle, options?: LoadOptions): Promise<Model>;
