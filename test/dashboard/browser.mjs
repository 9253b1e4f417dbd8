// The pg_claim dashboard in a real browser: Debian's headless Chromium driven
// by playwright-core. Run by test/dashboard_test.sh, which prepares the
// cluster and passes (environment):
//   DASH_URL      dashboard connected as a member of claim_admin
//   DASH_RO_URL   dashboard connected as a role without claim_admin
//   EXPECT        JSON {queue: {column: value}} read from claim.metrics()
//   DEAD_QUEUE, DEAD_ID   a dead item to redrive
//   ARTIFACTS     folder for the screenshots
// Prints one "ok <what>" or "FAIL <what>: <why>" line per check.
import { chromium } from 'playwright-core';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const env = process.env;
const expect = JSON.parse(env.EXPECT);
const results = [];
const check = (what, cond, why = '') => {
  results.push(cond);
  console.log(cond ? `ok    ${what}` : `FAIL  ${what}${why ? `: ${why}` : ''}`);
};

const profile = mkdtempSync(join(tmpdir(), 'pg_claim-chromium-'));
// A fresh profile (--user-data-dir) per run, removed afterwards.
const browser = await chromium.launchPersistentContext(profile, {
  executablePath: '/usr/bin/chromium',
  headless: true,
  viewport: { width: 1500, height: 1000 },
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
         '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
try {
  const page = await browser.newPage();
  const cell = (queue, col) =>
    page.locator(`#queues tr[data-queue="${queue}"] td[data-col="${col}"]`).innerText();

  // 1. The page and its counts.
  const resp = await page.goto(env.DASH_URL);
  check('the page loads (200)', resp.status() === 200, `status ${resp.status()}`);
  check('the admin dashboard offers actions',
        (await page.locator('#mode').innerText()).includes('actions enabled'));
  for (const [queue, cols] of Object.entries(expect)) {
    for (const [col, want] of Object.entries(cols)) {
      const got = (await cell(queue, col)).trim();
      check(`queue ${queue}: ${col} = ${want}`, got === String(want), `page shows "${got}"`);
    }
  }
  const deadRow = page.locator(`#dead tr[data-queue="${env.DEAD_QUEUE}"][data-id="${env.DEAD_ID}"]`);
  check('the dead item is listed with its error',
        (await deadRow.count()) === 1 && (await deadRow.locator('td.error').innerText()).length > 0);
  check('claims are listed with their leases', (await page.locator('#claims tbody tr').count()) > 0);
  check('blocked groups are listed', (await page.locator('#blocked-groups tbody tr').count()) > 0);
  check('leases are listed', (await page.locator('#leases tbody tr').count()) > 0);
  await page.screenshot({ path: join(env.ARTIFACTS, 'dashboard.png'), fullPage: true });

  // 2. Redrive the dead item: it leaves the dead list and is ready again.
  const readyBefore = Number(await cell(env.DEAD_QUEUE, 'ready'));
  await Promise.all([
    page.waitForNavigation(),
    page.locator(`[data-testid="redrive-${env.DEAD_QUEUE}-${env.DEAD_ID}"]`).click(),
  ]);
  const msg = await page.locator('#msg').innerText().catch(() => '');
  check('redrive reports one item ready again', msg.includes('1 item(s) ready again'), `message "${msg}"`);
  check('the item left the dead items', (await deadRow.count()) === 0);
  const readyAfter = Number(await cell(env.DEAD_QUEUE, 'ready'));
  check('the queue has one more ready item', readyAfter === readyBefore + 1,
        `ready ${readyBefore} -> ${readyAfter}`);
  await page.screenshot({ path: join(env.ARTIFACTS, 'dashboard-after-redrive.png'), fullPage: true });

  // 3. Pause and resume a queue.
  await Promise.all([page.waitForNavigation(),
                     page.locator(`[data-testid="pause-${env.DEAD_QUEUE}"]`).click()]);
  check('pause shows the queue paused', (await cell(env.DEAD_QUEUE, 'paused')).trim() === 'yes');
  await Promise.all([page.waitForNavigation(),
                     page.locator(`[data-testid="resume-${env.DEAD_QUEUE}"]`).click()]);
  check('resume shows it running', (await cell(env.DEAD_QUEUE, 'paused')).trim() === 'no');

  // 4. A role without claim_admin: no buttons, and a POST is refused.
  const ro = await browser.newPage();
  await ro.goto(env.DASH_RO_URL);
  check('the read-only dashboard says so', (await ro.locator('#mode').innerText()).includes('read only'));
  check('the read-only dashboard has no buttons', (await ro.locator('button').count()) === 0);
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
