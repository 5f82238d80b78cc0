# workerd configuration of the test Worker (tests/js/workerd.test.mjs starts it on 127.0.0.1).
# Module names mirror the npm package, so the Worker imports "edgembed" as an application would;
# "edgembed" is dist/workerd.js, the file the package's "workerd" export condition selects.
# Run ./build.sh js and js/test.sh's bundle step first: the files below are embedded at start.
using Workerd = import "/workerd/workerd.capnp";

const config :Workerd.Config = (
  services = [ (name = "main", worker = .embedWorker) ],
  sockets = [ (name = "http", address = "127.0.0.1:8787", http = (), service = "main") ],
);

const embedWorker :Workerd.Worker = (
  compatibilityDate = "2026-11-01",
  modules = [
    (name = "worker.mjs", esModule = embed "worker.mjs"),
    (name = "vector_bytes.mjs", esModule = embed "../vector_bytes.mjs"),
    (name = "edgembed", esModule = embed "../../../js/dist/workerd.js"),
    (name = "index.js", esModule = embed "../../../js/dist/index.js"),
    (name = "env.js", esModule = embed "../../../js/dist/env.js"),
    (name = "errors.js", esModule = embed "../../../js/dist/errors.js"),
    (name = "host.js", esModule = embed "../../../js/dist/host.js"),
    (name = "loader.js", esModule = embed "../../../js/dist/loader.js"),
    (name = "abi.js", esModule = embed "../../../js/dist/abi.js"),
    (name = "bindings.js", esModule = embed "../../../js/dist/bindings.js"),
    (name = "modules.js", esModule = embed "../../../js/dist/modules.js"),
    (name = "session.js", esModule = embed "../../../js/dist/session.js"),
    (name = "embedder.js", esModule = embed "../../../js/dist/embedder.js"),
    (name = "reranker.js", esModule = embed "../../../js/dist/reranker.js"),
    (name = "pool.js", esModule = embed "../../../js/dist/pool.js"),
    (name = "batcher.js", esModule = embed "../../../js/dist/batcher.js"),
    (name = "batching/cost_model.js", esModule = embed "../../../js/dist/batching/cost_model.js"),
    (name = "batching/policy.js", esModule = embed "../../../js/dist/batching/policy.js"),
    (name = "batching/scheduler.js", esModule = embed "../../../js/dist/batching/scheduler.js"),
    (name = "wasm/edgembed.wasm", wasm = embed "../../../js/dist/wasm/edgembed.wasm"),
    (name = "wasm/edgembed-relaxed.wasm", wasm = embed "../../../js/dist/wasm/edgembed-relaxed.wasm"),
    (name = "edgembed/wasm/edgembed.wasm", wasm = embed "../../../js/dist/wasm/edgembed.wasm"),
    (name = "all-minilm-l6-v2.emb", data = embed "../../../build/js/all-minilm-l6-v2.emb"),
  ],
);
