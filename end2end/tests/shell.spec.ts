// The hard parts of the shell, in a real browser: server rendering,
// hydration, a server function round trip, themes, 404 and the ops endpoints.
import { expect, test, type Page } from '@playwright/test';

/**
 * Collects script errors and console errors. A refused request (4xx) that the
 * test provokes on purpose is logged by Chromium too: name its status to allow it.
 */
function watchErrors(page: Page, allowedStatus: number[] = []): string[] {
  const errors: string[] = [];
  page.on('pageerror', (e) => errors.push(`pageerror: ${e.message}`));
  page.on('console', (m) => {
    if (m.type() !== 'error') return;
    const allowed = allowedStatus.some((s) => m.text().includes(`status of ${s}`));
    if (!allowed) errors.push(`console: ${m.text()}`);
  });
  return errors;
}

/** Clicks until the hydrated button reacts (a click before hydration does nothing). */
async function clickWhenHydrated(page: Page, testId: string, expected: string) {
  const button = page.getByTestId(testId);
  await expect(async () => {
    await button.click();
    await expect(button).toHaveText(expected, { timeout: 1_000 });
  }).toPass({ timeout: 20_000 });
}

test.describe('without JavaScript', () => {
  test.use({ javaScriptEnabled: false });

  test('pages are rendered on the server with live figures', async ({ page }) => {
    const response = await page.goto('/');
    expect(response?.status()).toBe(200);
    await expect(page.getByRole('heading', { name: 'Overview' })).toBeVisible();
    for (const name of ['Experiments', 'Jobs', 'Templates', 'Admin']) {
      await expect(page.getByRole('navigation').getByRole('link', { name })).toBeVisible();
    }
    await expect(page.getByTestId('figure-experiments')).toContainText(/\d+\s*experiments?/);
    // One of a thing is singular ("on 1 node"), others plural.
    await expect(page.getByTestId('figure-gpus')).toContainText(/(^|\D)(1\s*GPU(?!s)|([02-9]|\d\d+)\s*GPUs)/);
    await expect(page.getByTestId('figure-gpus')).toContainText(/on (1 node|([02-9]|\d\d+) nodes)$/);
    // The executor's GPUs, as the admin page counts them (one simulated
    // here), linked for an admin.
    await expect(page.getByTestId('figure-gpus')).toHaveText(/^\s*1\s*GPU\s*on 1 node\s*$/);
    await expect(page.getByTestId('figure-gpus')).toHaveAttribute('href', '/admin');
    await expect(page.getByTestId('jobs-by-state')).toContainText('Queued');
    await expect(page).toHaveTitle('Trainyard');
  });

  test('the experiment form works without the wasm', async ({ page }) => {
    const name = `no-js-${Date.now()}`;
    await page.goto('/experiments');
    await page.getByLabel('New experiment').fill(name);
    // The browser posts the form to the server function, which redirects back.
    await page.getByRole('button', { name: 'Create' }).click();
    await expect(page.getByTestId('experiments')).toContainText(name);
    await expect(page).toHaveURL(/\/experiments\??$/);
  });
});

test('the page hydrates: a click handled in the browser changes it', async ({ page }) => {
  const errors = watchErrors(page);
  await page.goto('/');
  const html = page.locator('html');
  await expect(html).not.toHaveAttribute('data-theme', /.*/);
  await clickWhenHydrated(page, 'theme-toggle', 'Theme: light');
  await expect(html).toHaveAttribute('data-theme', 'light');
  await page.getByTestId('theme-toggle').click();
  await expect(html).toHaveAttribute('data-theme', 'dark');
  await page.screenshot({ path: test.info().outputPath('home-dark.png'), fullPage: true });

  // The choice survives a reload.
  await page.reload();
  await expect(html).toHaveAttribute('data-theme', 'dark');
  await expect(page.getByTestId('theme-toggle')).toHaveText('Theme: dark');
  expect(errors).toEqual([]);
});

test('pages run under their content security policy without a violation', async ({ page }) => {
  // Violations are reported to the page as events; collect them from the start.
  await page.addInitScript(() => {
    (window as unknown as { violations: string[] }).violations = [];
    document.addEventListener('securitypolicyviolation', (e) =>
      (window as unknown as { violations: string[] }).violations.push(`${e.violatedDirective} ${e.blockedURI}`),
    );
  });
  for (const path of ['/', '/jobs', '/templates', '/submit', '/settings/tokens']) {
    const response = await page.goto(path);
    const policy = response?.headers()['content-security-policy'] ?? '';
    expect(policy).toMatch(/script-src 'self' 'nonce-[A-Za-z0-9_-]{16,}' 'wasm-unsafe-eval'/);
    expect(response?.headers()['x-content-type-options']).toBe('nosniff');
    await clickWhenHydrated(page, 'theme-toggle', 'Theme: light');
    await page.getByTestId('theme-toggle').click();
    expect(await page.evaluate(() => (window as unknown as { violations: string[] }).violations)).toEqual([]);
  }
  // An inline script without the nonce is refused.
  const ran = await page.evaluate(() => {
    const s = document.createElement('script');
    s.textContent = 'window.injected = true';
    document.body.appendChild(s);
    return (window as unknown as { injected?: boolean }).injected === true;
  });
  expect(ran).toBe(false);
});

test('a server function round-trips to the database', async ({ page }) => {
  const errors = watchErrors(page, [409]);
  await page.goto('/');
  const figure = page.getByTestId('figure-experiments').locator('.figure');
  const before = Number(await figure.textContent());

  await page.getByRole('navigation').getByRole('link', { name: 'Experiments' }).click();
  await expect(page).toHaveURL(/\/experiments$/);
  const name = `mnist-${Date.now()}`;
  await page.getByLabel('New experiment').fill(name);
  await page.getByRole('button', { name: 'Create' }).click();
  const table = page.getByTestId('experiments');
  await expect(table).toContainText(name);

  // The same name again is refused, and the page says why.
  await page.getByLabel('New experiment').fill(name);
  await page.getByRole('button', { name: 'Create' }).click();
  await expect(page.getByRole('alert')).toContainText('already exists');
  await expect(table.getByText(name)).toHaveCount(1);

  // It was stored: a fresh server render shows it, and the overview counts it.
  await page.reload();
  await expect(page.getByTestId('experiments')).toContainText(name);
  await page.goto('/');
  await expect(figure).toHaveText(String(before + 1));
  await clickWhenHydrated(page, 'theme-toggle', 'Theme: light');
  await page.getByTestId('refresh').click();
  await expect(figure).toHaveText(String(before + 1));
  await page.screenshot({ path: test.info().outputPath('home-light.png'), fullPage: true });
  expect(errors).toEqual([]);
});

test('the dark theme follows the system', async ({ page }) => {
  await page.emulateMedia({ colorScheme: 'dark' });
  await page.goto('/');
  const dark = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
  await page.emulateMedia({ colorScheme: 'light' });
  const light = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
  expect(dark).toBe('rgb(15, 18, 23)');
  expect(light).toBe('rgb(247, 248, 250)');
});

test('every section of the navigation has a page', async ({ page }) => {
  const errors = watchErrors(page);
  await page.goto('/');
  for (const [name, heading] of [
    ['Jobs', 'Jobs'],
    ['Templates', 'Templates'],
    ['Admin', 'Admin'],
    ['Experiments', 'Experiments'],
  ]) {
    await page.getByRole('navigation').getByRole('link', { name }).click();
    await expect(page.getByRole('heading', { level: 1, name: heading })).toBeVisible();
    await expect(page.getByRole('navigation').getByRole('link', { name })).toHaveAttribute('aria-current', 'page');
  }
  await expect(page).toHaveTitle('Experiments · Trainyard');
  expect(errors).toEqual([]);
});

test('an unknown address gets the 404 page', async ({ page }) => {
  const response = await page.goto('/no/such/page');
  expect(response?.status()).toBe(404);
  await expect(page.getByRole('heading', { name: 'Page not found' })).toBeVisible();
  await page.getByRole('link', { name: 'Go to the overview' }).click();
  await expect(page.getByRole('heading', { name: 'Overview' })).toBeVisible();
});

test('operations endpoints answer', async ({ request }) => {
  const health = await request.get('/healthz');
  expect(health.status()).toBe(200);
  const ready = await request.get('/readyz');
  expect(ready.status()).toBe(200);
  expect(await ready.json()).toMatchObject({ status: 'ready', database: 'sqlite' });
  const metrics = await (await request.get('/metrics')).text();
  expect(metrics).toContain('trainyard_http_requests_total{method="GET",route="/healthz",status="200"}');
  expect(metrics).toContain('trainyard_db_pool_max_connections');
});
