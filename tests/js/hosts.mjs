// Where the test hosts live (installed from npm by js/test.sh into tests/js/hosts/node_modules)
// and small process helpers shared by the browser and workerd tests.
import { spawn } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import path from "node:path";
import { ROOT } from "./helpers.mjs";

const BIN = path.join(ROOT, "tests/js/hosts/node_modules");
export const WORKERD = process.env.EDGEMBED_WORKERD ?? path.join(BIN, ".bin/workerd");
export const CHROMIUM = process.env.EDGEMBED_CHROMIUM ?? "/usr/bin/chromium";
export const PLAYWRIGHT = path.join(BIN, "playwright-core/index.mjs");

/** A TCP port free on 127.0.0.1 right now. */
export async function freePort() {
  const srv = net.createServer();
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  const { port } = srv.address();
  await new Promise((r) => srv.close(r));
  return port;
}

/** Starts a process; its output goes to `log`. Returns {child, stop()}. */
export function start(cmd, args, { log, cwd = ROOT } = {}) {
  const out = log ? fs.openSync(log, "w") : "ignore";
  // Its own process group: npm launchers (workerd's) start the real binary as a child, and
  // stop() must end both, or the binary outlives the test.
  const child = spawn(cmd, args, { cwd, stdio: ["ignore", out, out], detached: true });
  const killGroup = (signal) => {
    try {
      process.kill(-child.pid, signal);
    } catch {
      /* already gone */
    }
  };
  return {
    child,
    stop: () =>
      new Promise((resolve) => {
        if (child.exitCode !== null || child.signalCode !== null) {
          killGroup("SIGTERM");
          return resolve();
        }
        child.once("exit", () => {
          killGroup("SIGTERM");
          resolve();
        });
        killGroup("SIGTERM");
      }),
  };
}

/** Polls `url` until it answers (any status) or `ms` pass. */
export async function waitFor(url, ms = 20000, proc) {
  const end = Date.now() + ms;
  for (;;) {
    try {
      await fetch(url);
      return;
    } catch (e) {
      if (proc && proc.exitCode !== null) throw new Error(`the server exited with code ${proc.exitCode} before answering ${url}`);
      if (Date.now() > end) throw new Error(`${url} did not answer within ${ms} ms: ${e.message}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}
