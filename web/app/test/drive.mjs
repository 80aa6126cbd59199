// The browser half of tests/serve/web_app_browser.rs: headless Chromium (the
// system's, given as CHROMIUM; puppeteer-core downloads nothing) driven by
// JSON commands, one per stdin line, each answered by one JSON line on
// stdout. The scenario lives in the Rust test; this only does what it says:
//
//   {"do":"goto","url":U}  {"do":"type","sel":S,"text":T}  {"do":"click","sel":S}
//   {"do":"press","sel":S,"key":K,"mods":["Control"]}  {"do":"waitText","sel":S,"text":T,"timeout":MS}
//   {"do":"text","sel":S}  {"do":"text","sel":S,"raw":true} (textContent, exact)  {"do":"attr","sel":S,"name":N}
//   {"do":"value","sel":S}  {"do":"count","sel":S}
//   {"do":"viewport","width":W,"height":H}  {"do":"screenshot","path":P}
//   {"do":"log"}: every request URL, websocket URL and frame count, console errors
//   {"do":"marks","clear":B}: the page's performance marks and measures named gel:* (cleared after if B)
//   {"do":"close"}
//
// A failed command answers {"ok":false,"error":…} and saves a screenshot
// next to SCREENSHOTS as failed-<n>.png.

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import puppeteer from "puppeteer-core";

const profile = mkdtempSync(join(tmpdir(), "gelstore-chromium-"));
const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  headless: true,
  userDataDir: profile,
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const page = await browser.newPage();
await page.setViewport({ width: 1100, height: 900 });
const requests = [];
const sockets = [];
let frames = 0;
const consoleErrors = [];
page.on("request", (r) => requests.push(r.url()));
page.on("console", (m) => {
  if (m.type() === "error") consoleErrors.push(m.text());
});
page.on("pageerror", (e) => consoleErrors.push(`pageerror: ${e.message}`));
const cdp = await page.createCDPSession();
await cdp.send("Network.enable");
cdp.on("Network.webSocketCreated", (e) => sockets.push(e.url));
cdp.on("Network.webSocketFrameReceived", () => frames++);

// Text of every element matching `sel` (innerText: what a person sees).
const textsOf = (sel) => page.$$eval(sel, (els) => els.map((e) => e.innerText ?? e.textContent ?? ""));

async function run(c) {
  switch (c.do) {
    case "goto":
      await page.goto(c.url, { waitUntil: "load" });
      return {};
    case "type": {
      await page.waitForSelector(c.sel, { visible: true, timeout: 15000 });
      await page.$eval(c.sel, (el) => {
        el.value = "";
      });
      await page.type(c.sel, c.text);
      return {};
    }
    case "click":
      await page.waitForSelector(c.sel, { visible: true, timeout: c.timeout ?? 15000 });
      await page.click(c.sel);
      return {};
    case "select":
      await page.waitForSelector(c.sel, { visible: true, timeout: 15000 });
      await page.select(c.sel, c.value);
      return {};
    case "press": {
      await page.focus(c.sel);
      for (const m of c.mods ?? []) await page.keyboard.down(m);
      await page.keyboard.press(c.key);
      for (const m of (c.mods ?? []).reverse()) await page.keyboard.up(m);
      return {};
    }
    case "waitText": {
      const deadline = Date.now() + (c.timeout ?? 15000);
      for (;;) {
        const texts = await textsOf(c.sel).catch(() => []);
        if (texts.some((t) => t.includes(c.text))) return { texts };
        if (Date.now() > deadline) throw new Error(`no ${c.sel} shows ${JSON.stringify(c.text)}; they show ${JSON.stringify(texts).slice(0, 2000)}`);
        await new Promise((r) => setTimeout(r, 100));
      }
    }
    case "text":
      if (c.raw) return { text: await page.$eval(c.sel, (el) => el.textContent) };
      return { text: (await textsOf(c.sel))[0] ?? null };
    case "attr":
      return { value: await page.$eval(c.sel, (el, name) => el.getAttribute(name), c.name) };
    case "value":
      return { value: await page.$eval(c.sel, (el) => el.value) };
    case "count":
      return { count: (await page.$$(c.sel)).length };
    case "viewport":
      await page.setViewport({ width: c.width, height: c.height });
      return {};
    case "screenshot":
      await page.screenshot({ path: c.path, fullPage: c.fullPage ?? false });
      return {};
    case "marks":
      return {
        marks: await page.evaluate((clear) => {
          const pick = (e) => ({ name: e.name, type: e.entryType, start: e.startTime, duration: e.duration, detail: e.detail ?? null });
          const out = [...performance.getEntriesByType("mark"), ...performance.getEntriesByType("measure")].filter((e) => e.name.startsWith("gel:")).map(pick);
          if (clear) {
            performance.clearMarks();
            performance.clearMeasures();
          }
          return out;
        }, Boolean(c.clear)),
      };
    case "log":
      return { requests, sockets, frames, consoleErrors };
    default:
      throw new Error(`unknown command ${c.do}`);
  }
}

let failures = 0;
const lines = createInterface({ input: process.stdin });
for await (const line of lines) {
  if (!line.trim()) continue;
  const c = JSON.parse(line);
  if (c.do === "close") break;
  try {
    process.stdout.write(`${JSON.stringify({ ok: true, ...(await run(c)) })}\n`);
  } catch (e) {
    if (process.env.SCREENSHOTS) await page.screenshot({ path: join(process.env.SCREENSHOTS, `failed-${++failures}.png`), fullPage: true }).catch(() => undefined);
    process.stdout.write(`${JSON.stringify({ ok: false, error: String(e?.message ?? e) })}\n`);
  }
}
await browser.close();
rmSync(profile, { recursive: true, force: true });
