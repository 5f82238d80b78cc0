// A .wasm import in Cloudflare Workers (and bundlers configured for it) is a compiled module.
declare const module: WebAssembly.Module;
export default module;
