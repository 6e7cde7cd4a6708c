// The adversarial suite in Chromium (issue 16; server/tests/it/security.rs
// holds the rest): names people choose cannot break out of the page title
// into markup, an uploaded artifact can never run as the site's script even
// where HTML gets injected, and a hostile query is refused in place while
// the server lives on.
import { expect, test, type Page } from '@playwright/test';

async function newRun(page: Page, name: string): Promise<string> {
  const answer = await page.request.post('/api/2.0/mlflow/runs/create', {
    data: { experiment_id: '0', run_name: name },
  });
  expect(answer.status()).toBe(200);
  return (await answer.json()).run.info.run_id;
}

test('a run name full of markup stays text in the title and the page', async ({ page }) => {
  const name = '</title><script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">';
  const run = await newRun(page, name);
  const dialogs: string[] = [];
  page.on('dialog', (d) => {
    dialogs.push(d.message());
    void d.dismiss();
  });
  await page.goto(`/experiments/0/runs/${run}`);
  await expect(page).toHaveTitle(/\u2039\/title>\u2039script>window.__pwned = 1/);
  await expect(page.getByTestId('run-name')).toContainText('<script>window.__pwned = 1</script>');
  expect(await page.evaluate(() => (window as unknown as { __pwned?: number }).__pwned)).toBeUndefined();
  expect(dialogs).toEqual([]);
});

test("an artifact cannot be loaded as the site's script", async ({ page }) => {
  const run = await newRun(page, 'artifacts');
  const url = `/api/2.0/mlflow-artifacts/artifacts/0/${run}/artifacts/evil.js`;
  const put = await page.request.put(url, {
    data: 'window.__pwned = 3;',
    headers: { 'Content-Type': 'application/javascript' },
  });
  expect(put.status()).toBe(200);
  await page.goto('/experiments');
  // As an HTML injection would: a same-origin <script src>, which the
  // page's policy allows; the artifact's type (bytes, nosniff) does not.
  const outcome = await page.evaluate(
    (src) =>
      new Promise<string>((resolve) => {
        const script = document.createElement('script');
        script.src = src;
        script.onload = () => resolve('loaded');
        script.onerror = () => resolve('refused');
        document.head.appendChild(script);
      }),
    url,
  );
  expect(outcome).toBe('refused');
  expect(await page.evaluate(() => (window as unknown as { __pwned?: number }).__pwned)).toBeUndefined();
});

test('a query nested thousands deep is refused in place and the server lives on', async ({ page }) => {
  const deep = '('.repeat(4000) + 'metrics.a > 1' + ')'.repeat(4000);
  const answer = await page.goto(`/experiments/0?q=${encodeURIComponent(deep)}`);
  expect(answer?.status()).toBeLessThan(500);
  const health = await page.request.get('/healthz');
  expect(health.status()).toBe(200);
});
