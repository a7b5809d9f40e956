// Drives the operator page in headless Chromium (Debian's chromium through
// playwright-core): sign in, find the escalation a refused call made, read
// its package, approve it through the page (confirming the dialog), then
// open the run and the dashboard. Prints one JSON object of what it saw;
// the Python test asserts on it. Screenshots go to the artefact directory.
//   node operator_page.js ADMIN_URL TOKEN RUN ARTEFACT_DIR USER_DATA_DIR
const { chromium } = require('playwright-core');
const path = require('path');

const [base, token, run, artefacts, userData] = process.argv.slice(2);

(async () => {
  const context = await chromium.launchPersistentContext(userData, {
    executablePath: '/usr/bin/chromium',
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
           '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    viewport: { width: 1280, height: 900 },
  });
  const out = { external_requests: [] };
  try {
    const page = context.pages()[0] || await context.newPage();
    page.setDefaultTimeout(15000);
    page.on('request', (r) => { if (!r.url().startsWith(base)) out.external_requests.push(r.url()); });
    const dialogs = [];
    page.on('dialog', async (d) => { dialogs.push(d.message()); await d.accept(); });

    await page.goto(base + '/');
    out.login_visible = await page.locator('input[name=token]').isVisible();
    await page.fill('input[name=token]', token);
    await page.click('button[type=submit]');
    await page.waitForSelector('#queue');

    const row = page.locator('tr.escalation', { hasText: run });
    out.queue_rows = await row.count();
    out.queue_reason = out.queue_rows ? (await row.first().locator('td').nth(1).innerText()).trim() : '';
    await page.screenshot({ path: path.join(artefacts, 'queue.png'), fullPage: true });

    await Promise.all([page.waitForURL(/\/escalations\/\d+$/), row.first().locator('a').first().click()]);
    out.question = (await page.locator('dd.question').innerText()).trim();
    out.key = (await page.locator('dd.key').innerText()).trim();
    out.trace = (await page.locator('dd.trace').innerText()).trim();
    out.package_json = await page.locator('#package-json').innerText();
    out.tools_tried = await page.locator('#tools-tried tbody tr').count();
    await page.screenshot({ path: path.join(artefacts, 'escalation.png'), fullPage: true });

    await Promise.all([page.waitForLoadState('load'), page.click('button.approve')]);
    await page.waitForFunction(() => document.querySelector('dd.state')?.innerText.trim() === 'approved');
    out.state_after = (await page.locator('dd.state').innerText()).trim();
    out.dialogs = dialogs;
    out.actions_left = await page.locator('#actions').count();

    await page.goto(base + '/runs/' + encodeURIComponent(run));
    out.run_state = (await page.locator('dd.run-state').innerText()).trim();
    out.run_intents = await page.locator('#intents tbody tr').count();
    await page.screenshot({ path: path.join(artefacts, 'run.png'), fullPage: true });

    await page.goto(base + '/dashboard');
    out.charts = {};
    for (const id of ['chart-escalations', 'chart-open', 'chart-refusals', 'chart-retry-depth']) {
      out.charts[id] = await page.locator('#' + id + ' svg rect.bar').count();
    }
    out.cards = {};
    for (const id of ['open-escalations', 'unknown-past-ttl', 'duplicate-receipts']) {
      out.cards[id] = (await page.locator('#' + id + ' .n').innerText()).trim();
    }
    await page.screenshot({ path: path.join(artefacts, 'dashboard.png'), fullPage: true });
  } finally {
    await context.close();
  }
  process.stdout.write(JSON.stringify(out) + '\n');
})().catch((e) => {
  process.stderr.write(String(e && e.stack || e) + '\n');
  process.exit(1);
});
