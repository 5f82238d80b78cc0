// Runs tests/pyodide/check.py inside Pyodide under Node, offline.
//
//   node tests/pyodide/run.mjs WORKDIR
//
// WORKDIR (prepared by tests/python/test_pyodide.py) holds wheels/ (micropip, packaging and the
// edgembed wheel), the bundle, and receives what check.py writes. It is mounted at /work in
// Pyodide's file system. A loopback HTTP server serves WORKDIR for the URL cases; nothing else
// is fetched: Pyodide itself comes from node_modules (npm ci in this folder), micropip and
// packaging from the local wheels. The last line printed is `RESULT <json>` (check.py's report).
import { createServer } from "node:http";
import { readFile, readdir } from "node:fs/promises";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { loadPyodide } from "pyodide";

const here = path.dirname(fileURLToPath(import.meta.url));
const work = path.resolve(process.argv[2] ?? "");
if (!process.argv[2]) {
  console.error("usage: node tests/pyodide/run.mjs WORKDIR");
  process.exit(2);
}

const server = createServer(async (req, res) => {
  const name = path.basename(decodeURIComponent(new URL(req.url, "http://x").pathname));
  try {
    const body = await readFile(path.join(work, name));
    res.writeHead(200, { "content-type": "application/octet-stream" });
    res.end(body);
  } catch {
    res.writeHead(404);
    res.end();
  }
});
await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
const base = `http://127.0.0.1:${server.address().port}/`;

try {
  const t0 = performance.now();
  const pyodide = await loadPyodide({ stdout: (s) => console.log(s), stderr: (s) => console.error(s) });
  const wheels = (await readdir(path.join(work, "wheels"))).filter((f) => /^(micropip|packaging)-.*\.whl$/.test(f));
  await pyodide.loadPackage(wheels.map((f) => path.join(work, "wheels", f)), { messageCallback: () => {} });
  pyodide.mountNodeFS("/work", work);
  pyodide.globals.set("BASE_URL", base);
  const code = await readFile(path.join(here, "check.py"), "utf8");
  const report = await pyodide.runPythonAsync(code, { filename: "check.py" });
  console.log(`pyodide ${pyodide.version} ran check.py in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  console.log(`RESULT ${report}`);
} finally {
  server.close();
}
