// Opens a running `embed serve`'s Swagger UI (/docs) and ReDoc (/redoc) pages in headless
// Chromium (Debian's, driven by npm playwright-core from tests/js/hosts) and reports what they
// rendered and every request that went to another host than the server's (blocked).
//
//   node tests/python/docs_pages.mjs SERVER_URL [CHROMIUM]
//
// The last line printed is a JSON report; tests/python/test_serve_tei.py reads it.
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const PLAYWRIGHT = path.join(here, "../js/hosts/node_modules/playwright-core/index.mjs");

const [url, chromiumPath] = process.argv.slice(2);
if (!url) {
  console.error("usage: node tests/python/docs_pages.mjs SERVER_URL [CHROMIUM]");
  process.exit(2);
}
const { chromium } = await import(PLAYWRIGHT);
const origin = new URL(url).origin;
const browser = await chromium.launch({
  executablePath: chromiumPath ?? "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"],
});
const report = { foreign: [], errors: [] };
try {
  const context = await browser.newContext();
  await context.route("**/*", (route) => {
    const target = route.request().url();
    if (target.startsWith(origin) || target.startsWith("data:") || target.startsWith("blob:")) {
      return route.continue();
    }
    report.foreign.push(target);
    return route.abort();
  });
  const page = await context.newPage();
  page.on("pageerror", (e) => report.errors.push(e.message));
  await page.goto(`${url}/docs`);
  await page.waitForSelector(".opblock", { timeout: 60000 });
  report.swagger_operations = await page.locator(".opblock").count();
  report.swagger_paths = await page.locator(".opblock-summary-path").allInnerTexts();
  await page.goto(`${url}/redoc`);
  await page.waitForSelector("h1", { timeout: 60000 });
  report.redoc_title = (await page.locator("h1").first().innerText()).trim();
} finally {
  await browser.close();
}
console.log(JSON.stringify(report));
