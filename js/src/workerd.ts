/**
 * The entry for Cloudflare Workers (the "workerd" export condition). Workers cannot
 * compile WebAssembly from bytes, but they import .wasm files as ready modules: this entry
 * imports the engine builds and hands them to the package, so `Embedder.load(bundle)` needs no
 * engineModule option there (`build: "relaxed"` picks the relaxed build, after its probe).
 */
import relaxed from "./wasm/edgembed-relaxed.wasm";
import simd128 from "./wasm/edgembed.wasm";
import { provideModules } from "./modules.js";

provideModules({ simd128, relaxed });

export * from "./index.js";
