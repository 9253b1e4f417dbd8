// The pg_claim dashboard in a real browser: Debian's headless Chromium driven
// by playwright-core. Run by test/ops/dashboard_test.sh, which prepares the
// cluster and passes (environment):
//   DASH_URL      dashboard connected as a member of claim_admin
//   DASH_RO_URL   dashboard connected as a role without claim_admin
//   EXPECT        JSON {queue: {column: value}} read from claim.metrics()
//   DEAD_QUEUE, DEAD_ID   a dead item to redrive
//   RELEASED_QUEUE, RELEASED_ID   an item given back with claim.release
//   CLAIMED_ID    an item of DEAD_QUEUE under a live claim, to cancel
//   ARTIFACTS     folder for the screenshots
// Prints one "ok <what>" or "FAIL <what>: <why>" line per check. The page
// is 1366 px wide, a common laptop screen.
import { chromium } from 'playwright-core';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const env = process.env;
const expect = JSON.parse(env.EXPECT);
const WIDTH = 1366;
const results = [];
const check = (what, cond, why = '') => {
  results.push(Boolean(cond));
  console.log(cond ? `ok    ${what}` : `FAIL  ${what}${why ? `: ${why}` : ''}`);
};
const url = (base, query) => new URL(query, base).href;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const profile = mkdtempSync(join(tmpdir(), 'pg_claim-chromium-'));
// A fresh profile (--user-data-dir) per run, removed afterwards.
const browser = await chromium.launchPersistentContext(profile, {
  executablePath: '/usr/bin/chromium',
  headless: true,
  viewport: { width: WIDTH, height: 900 },
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
         '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
try {
  const page = await browser.newPage();
  // Queue gauges are in #queues; the counters since server start in #counters.
  const cell = async (queue, col) => {
    const loc = page.locator(`:is(#queues, #counters) tr[data-queue="${queue}"] td[data-col="${col}"]`);
    return (await loc.count()) ? ((await loc.first().textContent()) || '').trim() : '<no cell>';
  };
  const attr = async (css, name) => {
    const loc = page.locator(css);
    return (await loc.count()) ? await loc.first().getAttribute(name) : null;
  };

  // 1. The page and its counts (auto-refresh off, so nothing reloads under the checks).
  const resp = await page.goto(url(env.DASH_URL, '/?refresh=0'));
  check('the page loads (200)', resp.status() === 200, `status ${resp.status()}`);
  check('the admin dashboard offers actions',
        (await page.locator('#mode').innerText()).includes('actions enabled'));
  check('no section failed', (await page.locator('.section-error').count()) === 0,
        await page.locator('.section-error').allInnerTexts().then((t) => t.join(' | ')));
  for (const [queue, cols] of Object.entries(expect)) {
    for (const [col, want] of Object.entries(cols)) {
      const got = await cell(queue, col);
      check(`queue ${queue}: ${col} = ${want}`, got === String(want), `page shows "${got}"`);
    }
  }
  const deadRow = page.locator(`#dead tr[data-queue="${env.DEAD_QUEUE}"][data-id="${env.DEAD_ID}"]`);
  check('the dead item is listed with its error',
        (await deadRow.count()) === 1 && (await deadRow.locator('td.error').innerText()).length > 0);
  check('claims are listed with their leases', (await page.locator('#claims tbody tr').count()) > 0);
  check('the released item is not listed as claimed',
        (await page.locator(`#claims tr[data-queue="${env.RELEASED_QUEUE}"][data-id="${env.RELEASED_ID}"]`).count()) === 0);
  check('blocked groups are listed', (await page.locator('#blocked-groups tbody tr').count()) > 0);
  check('leases are listed', (await page.locator('#leases tbody tr').count()) > 0);
  check('schedules are listed', (await page.locator('#schedules tbody tr').count()) > 0);

  // 2. Finished items with their results.
  const done = page.locator('#finished tr[data-state="completed"]');
  check('finished items: a completed item with its result',
        (await done.count()) > 0 && (await done.first().locator('td.result').innerText()).includes('"rows":42'),
        `${await done.count()} completed rows`);
  check('finished items: the cancelled item', (await page.locator('#finished tr[data-state="cancelled"]').count()) === 1);
  check('finished items: dead items are in their own section only', (await page.locator('#finished tr[data-state="dead"]').count()) === 0);

  // 3. Charts of the last hour: a line per series, the last point the gauge of the table.
  const readyAll = Object.keys(expect).length && (await page.locator('#queues td[data-col="ready"]').allTextContents())
    .reduce((a, t) => a + Number(t), 0);
  const depthReady = '#chart-depth polyline[data-series="ready"]';
  check('depth chart: a line of ready items with at least two samples',
        Number(await attr(depthReady, 'data-points')) >= 2, `data-points ${await attr(depthReady, 'data-points')}`);
  check('depth chart: its last point is the ready count of all queues',
        (await attr(depthReady, 'data-last')) === String(readyAll), `${await attr(depthReady, 'data-last')} vs ${readyAll}`);
  for (const s of ['in_flight', 'scheduled', 'dead_items']) {
    check(`depth chart: a line of ${s}`, (await page.locator(`#chart-depth polyline[data-series="${s}"]`).count()) === 1);
  }
  for (const s of ['enqueued', 'completed', 'failed']) {
    check(`throughput chart: a line of ${s}/s with points`,
          Number(await attr(`#chart-throughput polyline[data-series="${s}"]`, 'data-points')) >= 1);
  }
  check('the charts are drawn (svg with axes)',
        (await page.locator('#chart-depth > svg text').count()) >= 10 && (await page.locator('#chart-throughput > svg').count()) === 1);
  await Promise.all([page.waitForNavigation(), page.locator(`#charts .chart-nav a:text-is("${env.DEAD_QUEUE}")`).click()]);
  check(`depth chart of queue ${env.DEAD_QUEUE} alone`,
        (await attr(depthReady, 'data-last')) === (await cell(env.DEAD_QUEUE, 'ready')),
        `${await attr(depthReady, 'data-last')} vs ${await cell(env.DEAD_QUEUE, 'ready')}`);
  await page.goto(url(env.DASH_URL, '/?refresh=0'));

  // 4. At 1366 px every action button is on screen, and the page does not scroll sideways.
  const buttons = page.locator('#queues button, #dead button, #claims button');
  const n = await buttons.count();
  const off = [];
  for (let i = 0; i < n; i++) {
    const b = await buttons.nth(i).boundingBox();
    if (!b || b.x < 0 || b.x + b.width > WIDTH) off.push(await buttons.nth(i).getAttribute('data-testid'));
  }
  check(`all ${n} action buttons are within ${WIDTH} px`, n > 0 && off.length === 0, `off screen: ${off.join(' ')}`);
  const scrollWidth = await page.evaluate(() => document.documentElement.scrollWidth);
  check(`the page is not wider than ${WIDTH} px`, scrollWidth <= WIDTH, `scrollWidth ${scrollWidth}`);
  await page.screenshot({ path: join(env.ARTIFACTS, 'dashboard.png'), fullPage: true });

  // 5. Auto-refresh reloads the page, and stops when paused.
  await page.goto(url(env.DASH_URL, '/?refresh=4'));
  check('auto-refresh is on by its link', (await page.locator('#refresh-state').innerText()).includes('every 4 s'));
  await Promise.all([page.waitForNavigation(), page.locator('#refresh-toggle').click()]);
  check('pausing says so', (await page.locator('#refresh-state').innerText()).includes('paused'));
  const paused = await page.locator('#rendered').innerText();
  await sleep(5000);
  check('a paused page is not reloaded', (await page.locator('#rendered').innerText()) === paused);
  await page.goto(url(env.DASH_URL, '/?refresh=1'));
  const first = await page.locator('#rendered').innerText();
  let reloaded = false;
  for (let i = 0; i < 40 && !reloaded; i++) {
    await sleep(250);
    reloaded = (await page.locator('#rendered').innerText().catch(() => first)) !== first;
  }
  check('auto-refresh reloads the page', reloaded);
  await page.goto(url(env.DASH_URL, '/?refresh=0'));

  // 6. Redrive the dead item: it leaves the dead list and is ready again.
  const readyBefore = Number(await cell(env.DEAD_QUEUE, 'ready'));
  await Promise.all([
    page.waitForNavigation(),
    page.locator(`[data-testid="redrive-${env.DEAD_QUEUE}-${env.DEAD_ID}"]`).click(),
  ]);
  const msg = await page.locator('#msg').innerText().catch(() => '');
  check('redrive reports one item ready again', msg.includes('1 item(s) ready again'), `message "${msg}"`);
  check('after an action the page stays without auto-refresh', (await page.locator('#refresh-state').innerText()).includes('paused'));
  check('the item left the dead items', (await deadRow.count()) === 0);
  const readyAfter = Number(await cell(env.DEAD_QUEUE, 'ready'));
  check('the queue has one more ready item', readyAfter === readyBefore + 1,
        `ready ${readyBefore} -> ${readyAfter}`);
  await page.screenshot({ path: join(env.ARTIFACTS, 'dashboard-after-redrive.png'), fullPage: true });

  // 7. Pause and resume a queue.
  await Promise.all([page.waitForNavigation(),
                     page.locator(`[data-testid="pause-${env.DEAD_QUEUE}"]`).click()]);
  check('pause shows the queue paused', (await cell(env.DEAD_QUEUE, 'paused')) === 'yes');
  await Promise.all([page.waitForNavigation(),
                     page.locator(`[data-testid="resume-${env.DEAD_QUEUE}"]`).click()]);
  check('resume shows it running', (await cell(env.DEAD_QUEUE, 'paused')) === 'no');

  // 8. Cancel a claimed item: its claim goes.
  const claimRow = page.locator(`#claims tr[data-queue="${env.DEAD_QUEUE}"][data-id="${env.CLAIMED_ID}"]`);
  check('the claimed item is listed', (await claimRow.count()) === 1);
  await Promise.all([page.waitForNavigation(),
                     page.locator(`[data-testid="cancel-${env.DEAD_QUEUE}-${env.CLAIMED_ID}"]`).click()]);
  const cmsg = await page.locator('#msg').innerText().catch(() => '');
  check('cancel reports one item cancelled', cmsg.includes('1 item(s) cancelled'), `message "${cmsg}"`);
  check('the cancelled item is no longer claimed', (await claimRow.count()) === 0);

  // 9. A role without claim_admin: no buttons, and a POST is refused.
  const ro = await browser.newPage();
  await ro.goto(url(env.DASH_RO_URL, '/?refresh=0'));
  check('the read-only dashboard says so', (await ro.locator('#mode').innerText()).includes('read only'));
  check('the read-only dashboard has no buttons', (await ro.locator('button').count()) === 0);
  check('the read-only dashboard draws the depth chart',
        (await ro.locator('#chart-depth polyline[data-series="ready"]').count()) === 1);
  const denied = await ro.request.post(new URL('/action', env.DASH_RO_URL).href, {
    form: { action: 'redrive', queue: env.DEAD_QUEUE, csrf: 'x' }, maxRedirects: 0 });
  check('a POST to the read-only dashboard is refused (403)', denied.status() === 403,
        `status ${denied.status()}`);
  // The admin dashboard refuses a form without its token (another site's form).
  const forged = await ro.request.post(new URL('/action', env.DASH_URL).href, {
    form: { action: 'pause', queue: env.DEAD_QUEUE, csrf: 'forged' }, maxRedirects: 0 });
  check('a POST without the page token is refused (403)', forged.status() === 403,
        `status ${forged.status()}`);
} catch (e) {
  check('the browser run', false, String(e && e.stack || e));
} finally {
  await browser.close();
  rmSync(profile, { recursive: true, force: true });
}
process.exit(results.every(Boolean) ? 0 : 1);
