// Drives headless Chromium over a running sortie dashboard for
// tests/services/daemon_dashboard.rs and prints what a person would see, as JSON.
//
// Environment: SORTIE_URL (the daemon), SORTIE_CHROMIUM (the browser binary),
// SORTIE_CONFIG_PATH and SORTIE_BAD_CONFIG (the invalid text to write over the config
// once the first checks are done), SORTIE_SHOTS (a directory for screenshots, optional),
// SORTIE_TOKEN (the daemon's bearer token: the log link first shows the login form).
import { chromium } from "playwright-core";
import { writeFileSync } from "node:fs";

const base = process.env.SORTIE_URL;
const shots = process.env.SORTIE_SHOTS;
const out = {};
const fractional = /\d{2}:\d{2}:\d{2}\.\d+/g;

const browser = await chromium.launch({
  executablePath: process.env.SORTIE_CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu"],
});
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const token = process.env.SORTIE_TOKEN;
  out.token_in_urls = [];
  page.on("request", (r) => { if (token && r.url().includes(token)) out.token_in_urls.push(r.url()); });
  await page.goto(base + "/");
  // The board is read by the server; wait until the live run shows on it.
  await page.locator(".ticket.state-running").first().waitFor({ timeout: 15000 });
  out.waiting = await page.$$eval(".ticket.state-waiting", (els) =>
    els.map((e) => ({
      title: e.querySelector(".title").innerText,
      reason: e.querySelector(".reason").innerText,
    })),
  );
  out.columns = await page.$$eval(".column h3", (els) => els.map((e) => e.innerText));
  out.live = await page.$$eval("#live tbody tr", (rows) => rows.map((r) => r.innerText));
  out.fractional_on_dashboard = (await page.locator("body").innerText()).match(fractional) || [];

  // At 1,400 px a lead sees every column: the board wraps, nothing scrolls sideways.
  await page.setViewportSize({ width: 1400, height: 900 });
  out.layout = await page.evaluate(() => ({
    scroll_width: document.documentElement.scrollWidth,
    columns: document.querySelectorAll(".column").length,
    cut_off: [...document.querySelectorAll(".column")]
      .filter((c) => c.getBoundingClientRect().right > 1400 || c.scrollWidth > c.clientWidth)
      .map((c) => c.dataset.status || "terminal"),
  }));
  if (shots) await page.screenshot({ path: shots + "/dashboard.png", fullPage: true });
  await page.setViewportSize({ width: 1280, height: 900 });

  // Refresh keeps the scroll position and does not reload the page.
  await page.setViewportSize({ width: 1280, height: 400 });
  await page.evaluate(() => { window.__noReload = true; window.scrollTo(0, 300); });
  const before = await page.evaluate(() => window.scrollY);
  await page.waitForTimeout(4500);
  out.scroll = { before, after: await page.evaluate(() => window.scrollY) };
  out.reloaded = !(await page.evaluate(() => window.__noReload === true));
  await page.setViewportSize({ width: 1280, height: 900 });

  // A live run's log link shows the agent's output; behind a token, after the login
  // form it leads to (the form posts the token; the cookie it sets opens the rest).
  await page.locator("#live a.log").first().click();
  await page.waitForLoadState();
  if (token) {
    out.log_refused = {
      login_form: (await page.locator("form#login").count()) === 1,
      text: await page.locator("body").innerText(),
    };
    await page.fill("#token", token);
    await Promise.all([page.waitForNavigation(), page.click("#login button")]);
  }
  out.log = await page.locator("body").innerText();
  await page.goto(base + "/");

  // A waiting ticket opens its page with the eligibility reason.
  await page.locator(".ticket.state-waiting .title").first().click();
  await page.locator("#eligibility").waitFor();
  out.ticket_page = {
    heading: await page.locator("h1").innerText(),
    eligibility: await page.locator("#eligibility").innerText(),
  };
  out.fractional_on_ticket = (await page.locator("body").innerText()).match(fractional) || [];
  if (shots) await page.screenshot({ path: shots + "/dashboard-ticket.png", fullPage: true });
  await page.goBack();
  await page.locator("#live").waitFor();

  // An invalid config edit shows the banner within one refresh (after the daemon's
  // next reload check), without a reload.
  await page.evaluate(() => { window.__noReload = true; });
  const started = Date.now();
  writeFileSync(process.env.SORTIE_CONFIG_PATH, process.env.SORTIE_BAD_CONFIG);
  try {
    await page.locator(".banner.error", { hasText: "config on disk is invalid" }).waitFor({ timeout: 15000 });
    out.banner = await page.locator(".banner.error", { hasText: "config on disk is invalid" }).innerText();
    out.banner_after_ms = Date.now() - started;
  } catch (e) {
    out.banner = null;
  }
  out.reloaded_for_banner = !(await page.evaluate(() => window.__noReload === true));
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
