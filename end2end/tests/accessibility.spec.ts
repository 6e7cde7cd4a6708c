// Every page, as a keyboard and screen-reader user meets it: axe-core finds
// no violation in the light and the dark theme (at 1440 px), with runs,
// a finished job and its timeline on them; the overview lists the latest
// runs and jobs; and at 390 px no page is wider than the screen.
import { expect, test } from '@playwright/test';
import { execFileSync } from 'node:child_process';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { violationsInBothThemes } from './a11y';

const python = join(
  process.env.MLFLOW_VENV ?? join(homedir(), '.cache', 'trainyard', 'mlflow-venv'),
  'bin',
  'python',
);

test('every page passes axe in both themes', async ({ page, baseURL }) => {
  test.setTimeout(180_000);
  await page.setViewportSize({ width: 1440, height: 900 });
  const out = execFileSync(
    python,
    [join(__dirname, '..', 'explorer', 'seed.py'), baseURL!, `a11y-${Date.now()}`, '3', '50'],
    { encoding: 'utf8', timeout: 120_000 },
  );
  const seeded = JSON.parse(out.trim().split('\n').pop()!) as { experiment_id: string; runs: string[] };
  const submitted = await page.request.post('/api/trainyard/v1/jobs', {
    data: { name: 'a11y', command: 'echo checked' },
  });
  expect(submitted.status()).toBe(201);
  const job = (await submitted.json()).job.id as number;
  await expect
    .poll(async () => (await (await page.request.get(`/api/trainyard/v1/jobs/${job}`)).json()).job.state, {
      timeout: 60_000,
    })
    .toBe('SUCCEEDED');

  // The overview leads back to them.
  await page.goto('/');
  await expect(page.getByTestId('recent-runs').locator(`tr[data-run="${seeded.runs[0]}"]`)).toBeVisible();
  await expect(page.getByTestId('recent-jobs').locator(`tr[data-job="${job}"]`)).toContainText('Succeeded');

  const pages: [string, string][] = [
    ['/', 'the overview'],
    ['/experiments', 'the experiments'],
    [`/experiments/${seeded.experiment_id}`, 'an experiment'],
    [`/experiments/${seeded.experiment_id}/runs/${seeded.runs[0]}`, 'a run'],
    [`/experiments/${seeded.experiment_id}/traces?q=${encodeURIComponent("span.type = 'LLM'")}`, 'the traces, filtered'],
    [`/compare?run=${seeded.runs[0]}&run=${seeded.runs[1]}`, 'a comparison'],
    ['/jobs', 'the jobs'],
    [`/jobs/${job}`, 'a job'],
    ['/submit', 'the submit form'],
    ['/templates', 'the templates'],
    ['/templates/new', 'the template editor'],
    ['/usage', 'the usage'],
    ['/admin', 'the admin page'],
    ['/admin/gpus', 'the GPUs'],
    ['/admin/audit', 'the audit trail'],
    ['/settings/tokens', 'the tokens'],
  ];
  // Every page is checked before the test says what it found.
  const found: string[] = [];
  for (const [path, what] of pages) {
    await page.goto(path);
    await page.waitForLoadState('networkidle');
    found.push(...(await violationsInBothThemes(page, what)));
  }
  expect(found).toEqual([]);

  // On a phone (390 px) no page is wider than the screen.
  await page.setViewportSize({ width: 390, height: 844 });
  const wide: string[] = [];
  for (const [path, what] of pages) {
    await page.goto(path);
    await page.waitForLoadState('networkidle');
    const [scroll, client] = await page.evaluate(() => [
      document.documentElement.scrollWidth,
      document.documentElement.clientWidth,
    ]);
    if (scroll > client + 1) wide.push(`${what}: ${scroll} px wide on a ${client} px screen`);
  }
  await page.goto('/');
  await page.screenshot({ path: test.info().outputPath('overview-390.png'), fullPage: true });
  expect(wide).toEqual([]);
});
