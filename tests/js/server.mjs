// A tiny static file server on 127.0.0.1 for the browser tests and examples/browser. It sends
// COOP: same-origin and COEP: require-corp, so pages are cross-origin isolated and can use
// SharedArrayBuffer (the pool's shared weights).
//
//   node tests/js/server.mjs [PORT]      serves the repository root (default port 8080)
import fs from "node:fs";
import http from "node:http";
import path from "node:path";
import { fileURLToPath } from "node:url";

const TYPES = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".mjs": "text/javascript; charset=utf-8",
  ".json": "application/json; charset=utf-8",
  ".wasm": "application/wasm",
  ".css": "text/css; charset=utf-8",
  ".png": "image/png",
  ".emb": "application/octet-stream",
};

/** Serves files under `root`; resolves to {server, url, close()}. */
export async function serve(root, { port = 0, isolate = true } = {}) {
  const base = path.resolve(root);
  const server = http.createServer((req, res) => {
    const url = new URL(req.url, "http://x");
    let file = path.resolve(base, "." + decodeURIComponent(url.pathname));
    if (fs.existsSync(file) && fs.statSync(file).isDirectory()) file = path.join(file, "index.html");
    const headers = isolate
      ? { "cross-origin-opener-policy": "same-origin", "cross-origin-embedder-policy": "require-corp", "cross-origin-resource-policy": "same-origin" }
      : {};
    if (!file.startsWith(base + path.sep) || !fs.existsSync(file) || !fs.statSync(file).isFile()) {
      res.writeHead(404, { ...headers, "content-type": "text/plain" });
      res.end("not found");
      return;
    }
    const size = fs.statSync(file).size;
    res.writeHead(200, {
      ...headers,
      "content-type": TYPES[path.extname(file)] ?? "application/octet-stream",
      "content-length": size,
      "cache-control": "no-cache",
    });
    if (req.method === "HEAD") return res.end();
    fs.createReadStream(file).pipe(res);
  });
  await new Promise((r) => server.listen(port, "127.0.0.1", r));
  return {
    server,
    url: `http://127.0.0.1:${server.address().port}`,
    close: () => new Promise((r) => server.close(r)),
  };
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
  const s = await serve(root, { port: Number(process.argv[2] ?? 8080) });
  console.log(`serving ${root} at ${s.url} (cross-origin isolated)`);
}
