// The experiment explorer in Chromium, on runs logged by the official mlflow
// client: filter with an OR query (and see a bad one explained in place),
// select with the keyboard, compare, toggle smoothing and log scale, zoom,
// hover, hide a run, group, hide identical params; a run's page mounts its
// charts as they scroll into view and follows a live run through the
// server's push; the pages read without JavaScript. Screenshots are kept as
// test artifacts.
import { expect, test, type Page } from '@playwright/test';
import { execFileSync } from 'node:child_process';
import { homedir } from 'node:os';
import { join } from 'node:path';

const python = join(
  process.env.MLFLOW_VENV ?? join(homedir(), '.cache', 'trainyard', 'mlflow-venv'),
  'bin',
  'python',
);

type Seeded = { experiment_id: string; runs: string[]; printed: string };

/** Logs runs with the mlflow client; see explorer/seed.py. */
function seed(baseURL: string, name: string, runs: number, steps: number, ...flags: string[]): Seeded {
  const out = execFileSync(
    python,
    [join(__dirname, '..', 'explorer', 'seed.py'), baseURL, name, String(runs), String(steps), ...flags],
    { encoding: 'utf8', timeout: 120_000 },
  );
  const lines = out.trim().split('\n');
  return { ...JSON.parse(lines[lines.length - 1]), printed: lines.slice(0, -1).join('\n') };
}

/** Waits until the wasm has hydrated the page (the theme toggle answers). */
async function hydrated(page: Page) {
  const toggle = page.getByTestId('theme-toggle');
  await expect(async () => {
    const before = await toggle.textContent();
    await toggle.click();
    await expect(toggle).not.toHaveText(before ?? '', { timeout: 1_000 });
  }).toPass({ timeout: 20_000 });
}

/** A chart, once drawn in the browser with `n` lines. */
function chart(page: Page, metric: string) {
  return page.locator(`figure.chart[data-metric="${metric}"]`);
}

test('filter, select, compare, smooth, log scale, zoom, hover, hide, group', async ({ page, baseURL }) => {
  test.setTimeout(120_000);
  const seeded = seed(baseURL!, `explore-${Date.now()}`, 12, 300);
  await page.goto(`/experiments/${seeded.experiment_id}`);
  await hydrated(page);
  await expect(page.getByTestId('match-count')).toHaveText('12 runs');
  await expect(page.locator('[data-testid="runs"] tbody tr[data-run]')).toHaveCount(12);

  // A query that does not parse is explained where it broke.
  const query = page.getByTestId('query');
  await query.fill("params.lr = '0.1' OR OR params.lr = '0.01'");
  await query.press('Enter');
  const error = page.getByTestId('query-error');
  await expect(error).toBeVisible();
  await expect(error.locator('.caret')).toHaveText(/^ {21}\^$/);

  // OR and parentheses: lr 0.1 or 0.01 → 8 of 12.
  await query.fill("params.lr = '0.1' OR (params.lr = '0.01' AND params.batch = '64')");
  await query.press('Enter');
  await expect(page.getByTestId('match-count')).toHaveText('6 runs match');
  await query.fill("params.lr = '0.1' OR params.lr = '0.01'");
  await query.press('Enter');
  await expect(page.getByTestId('match-count')).toHaveText('8 runs match');
  await expect(page).toHaveURL(/q=params\.lr/);

  // Sort by a column header; the URL keeps it.
  await page.locator('th a[data-sort="metrics.loss"]').click();
  await expect(page).toHaveURL(/sort=metrics\.loss/);
  await expect(page.locator('th[aria-sort="ascending"]')).toContainText('loss');

  // Select four runs with the keyboard: arrows move, space selects.
  const grid = page.getByTestId('runs');
  await grid.focus();
  for (let i = 0; i < 4; i++) {
    await grid.press('ArrowDown');
    await grid.press(' ');
    await expect(page.getByTestId('selected-count')).toHaveText(`${i + 1} selected`);
  }
  await expect(page).toHaveURL(/(sel=[0-9a-f]+.*){4}/);
  await page.screenshot({ path: test.info().outputPath('runs-table.png'), fullPage: true });

  // The selection survives a reload: it is in the URL.
  await page.reload();
  await expect(page.getByTestId('selected-count')).toHaveText('4 selected');
  // The server's page shows the selection before the app takes it over; a
  // click in between was once lost (the URL never changed), so the test
  // clicks once the page is hydrated.
  await hydrated(page);

  // The compare page's code (a chunk of its own) is fetched when the
  // pointer comes to the link, before the click.
  const chunk = page.waitForRequest(/\/pkg\/split_+compare_route_view_[0-9]+\.wasm$/);
  await page.getByTestId('compare').hover();
  await chunk;
  await page.getByTestId('compare').click();
  await expect(page).toHaveURL(/\/compare\?(run=[0-9a-f]+&?){4}/);
  await hydrated(page);
  // What people read first: each chosen metric's last, lowest and highest
  // value per run, with their steps.
  const figures = page.getByTestId('metric-figures');
  const lossRows = figures.locator('tr[data-metric="loss"] td[data-run]');
  await expect(lossRows).toHaveCount(4);
  for (const row of await lossRows.all()) {
    const figure = async (name: string) => Number(await row.locator(`[data-figure="${name}"]`).textContent());
    const [last, min, max] = [await figure('last'), await figure('min'), await figure('max')];
    expect(min).toBeLessThanOrEqual(last);
    expect(last).toBeLessThanOrEqual(max);
    expect(min).toBeLessThan(max);
  }
  const loss = chart(page, 'loss');
  await expect(loss).toHaveAttribute('data-series', '4');
  await expect(page.locator('figure.chart')).toHaveCount(4);
  const svg = loss.locator('.chart-svg svg');
  await expect(svg.locator('polyline')).toHaveCount(4);
  await expect(svg).toContainText('step');

  // Smoothing: each line twice (the raw one faint behind).
  await page.getByTestId('smoothing').fill('0.8');
  await expect(svg.locator('polyline')).toHaveCount(8);
  await expect(page).toHaveURL(/smooth=0\.80/);
  await page.getByTestId('smoothing').fill('0');
  await expect(svg.locator('polyline')).toHaveCount(4);

  // Log scale: the y ticks become powers of ten.
  const linear = await svg.innerHTML();
  await page.getByTestId('log-scale').check();
  await expect(page).toHaveURL(/log=1/);
  await expect.poll(async () => (await svg.innerHTML()) !== linear).toBe(true);
  await page.getByTestId('log-scale').uncheck();

  // Ignore outliers: the y axis fits the bulk of the values (the URL keeps it).
  await page.getByTestId('ignore-outliers').check();
  await expect(page).toHaveURL(/outliers=ignore/);
  await expect(svg.locator('polyline')).toHaveCount(4);
  await page.getByTestId('ignore-outliers').uncheck();
  await expect(page).not.toHaveURL(/outliers=ignore/);

  // Hover: a readout with each run's value.
  const area = loss.locator('.chart-area');
  await area.scrollIntoViewIfNeeded();
  const box = (await area.boundingBox())!;
  await page.mouse.move(box.x + box.width * 0.5, box.y + box.height * 0.5);
  await expect(loss.getByTestId('readout')).toContainText('step');
  await expect(loss.getByTestId('readout').locator('strong')).toHaveCount(4);
  const hovered = (await loss.getByTestId('readout').locator('strong').allTextContents()).map(Number);
  expect(hovered, 'highest value first').toEqual([...hovered].sort((a, b) => b - a));

  // Zoom: drag across the middle; the server is asked again for that range.
  const asked = page.waitForRequest((r) => r.url().endsWith('/api/chart_series') && (r.postData() ?? '').includes('"x_min"'));
  await page.mouse.move(box.x + box.width * 0.4, box.y + box.height * 0.5);
  await page.mouse.down();
  await page.mouse.move(box.x + box.width * 0.6, box.y + box.height * 0.5, { steps: 5 });
  await page.mouse.up();
  await asked;
  await expect(loss).toHaveAttribute('data-zoomed', 'true');
  // One zoom for every chart, kept in the URL.
  await expect(chart(page, 'accuracy')).toHaveAttribute('data-zoomed', 'true');
  await expect(page).toHaveURL(/x0=[-0-9.e]+&x1=/);
  await page.screenshot({ path: test.info().outputPath('compare-zoomed.png'), fullPage: true });
  await loss.getByTestId('reset-zoom').click();
  await expect(loss).toHaveAttribute('data-zoomed', 'false');
  await expect(page).not.toHaveURL(/x0=/);
  // The same from the keyboard: + zooms to the middle half, 0 shows it all.
  await area.focus();
  await page.keyboard.press('+');
  await expect(loss).toHaveAttribute('data-zoomed', 'true');
  await page.keyboard.press('0');
  await expect(loss).toHaveAttribute('data-zoomed', 'false');

  // Hide a run from the legend: its line, its figures and its params go.
  await page.getByTestId('legend').locator('button').first().click();
  await expect(loss).toHaveAttribute('data-series', '3');
  await expect(figures.locator('tr[data-metric="loss"] td[data-run]:visible')).toHaveCount(3);
  await expect(page.locator('[data-testid="param-diff"] thead th:visible')).toHaveCount(4);
  // Hidden in the URL too: a reload (or the link) keeps it hidden.
  await expect(page).toHaveURL(/[?&]hide=/);
  await page.reload();
  await loss.scrollIntoViewIfNeeded();
  await expect(loss).toHaveAttribute('data-series', '3');
  await page.getByTestId('legend').locator('button').first().click();
  await expect(loss).toHaveAttribute('data-series', '4');
  await expect(page).not.toHaveURL(/[?&]hide=/);
  // Whether a param differs is asked of the runs shown: with the runs of
  // another lr than the first's hidden, lr is the same in all shown.
  const lrRow = page.locator('[data-testid="param-diff"] tr[data-param="lr"]');
  await expect(lrRow).toHaveClass(/differs/);
  const lrs = await lrRow.locator('td').allTextContents();
  const others = lrs.flatMap((lr, i) => (lr === lrs[0] ? [] : [i]));
  expect(others.length).toBeGreaterThan(0);
  for (const i of others) await page.getByTestId('legend').locator('button').nth(i).click();
  await expect(lrRow).not.toHaveClass(/differs/);
  for (const i of others) await page.getByTestId('legend').locator('button').nth(i).click();
  await expect(lrRow).toHaveClass(/differs/);

  // Group by lr: a mean line per value, with its min–max band.
  await page.getByTestId('group-by').selectOption('params.lr');
  await expect(page).toHaveURL(/group=params\.lr/);
  await expect(loss).toHaveAttribute('data-series', '2');
  await expect(loss.locator('.chart-legend')).toContainText('lr=0.01');
  await expect(svg.locator('polygon').first()).toBeVisible();

  // Params: seed is the same everywhere and can be hidden.
  const seedRow = page.locator('[data-testid="param-diff"] tr[data-param="seed"]');
  await expect(seedRow).toBeVisible();
  await page.getByTestId('hide-identical').check();
  await expect(seedRow).toBeHidden();
  await expect(page.locator('[data-testid="param-diff"] tr[data-param="lr"]')).toBeVisible();

  // Parallel coordinates (lr and batch differ) and the scatter.
  await expect(page.getByTestId('parallel').locator('polyline')).toHaveCount(4);
  await expect(page.getByTestId('scatter')).toContainText('lr');
  await page.screenshot({ path: test.info().outputPath('compare-grouped.png'), fullPage: true });

  // The whole view comes back from its link.
  const link = page.url();
  await page.goto('/');
  await page.goto(link);
  await hydrated(page);
  await expect(chart(page, 'loss')).toHaveAttribute('data-series', '2');
  await expect(page.getByTestId('hide-identical')).toBeChecked();
});

test('scatter and parallel-coordinate labels cover no other label and stay inside', async ({ page, request }) => {
  const made = await request.post('/api/2.0/mlflow/experiments/create', { data: { name: `labels-${Date.now()}` } });
  expect(made.status()).toBe(200);
  const experiment = (await made.json()).experiment_id;
  const runs: string[] = [];
  // Four runs on one spot of the scatter, one near it, one far off; long
  // names and long values throughout.
  const figures = [
    ['100', 0.5], ['100', 0.5], ['100', 0.5], ['100', 0.5], ['110', 0.51], ['35000', 0.2],
  ] as const;
  for (const [i, [warmup, loss]] of figures.entries()) {
    const created = await request.post('/api/2.0/mlflow/runs/create', {
      data: { experiment_id: experiment, run_name: `a-rather-long-run-name-${i}`, start_time: Date.now() },
    });
    const run = (await created.json()).run.info.run_id;
    runs.push(run);
    const logged = await request.post('/api/2.0/mlflow/runs/log-batch', {
      data: {
        run_id: run,
        params: [
          { key: 'learning_rate_warmup_steps', value: warmup },
          { key: 'model_architecture_family', value: `a_very_long_categorical_value_number_${i % 3}` },
          { key: 'optimizer', value: i % 2 ? 'adamw' : 'sgd' },
        ],
        metrics: [{ key: 'validation_loss_at_the_end', value: loss, timestamp: Date.now(), step: 0 }],
      },
    });
    expect(logged.status()).toBe(200);
  }
  await page.setViewportSize({ width: 1440, height: 900 });
  await page.goto(`/compare?${runs.map((r) => `run=${r}`).join('&')}`);
  await hydrated(page);
  for (const id of ['scatter', 'parallel']) {
    const svg = page.locator(`[data-testid="${id}"] svg`);
    await expect(svg.locator('text').first()).toBeAttached();
    // The browser's own boxes of each label (rotated axis titles aside).
    const { width, height, boxes } = await svg.evaluate((el: SVGSVGElement) => ({
      width: Number(el.getAttribute('width')),
      height: Number(el.getAttribute('height')),
      boxes: [...el.querySelectorAll('text')]
        .filter((t) => !t.hasAttribute('transform'))
        .map((t) => {
          const b = t.getBBox();
          return { text: t.textContent!.trim(), x: b.x, y: b.y, w: b.width, h: b.height };
        }),
    }));
    expect(boxes.length, id).toBeGreaterThan(5);
    for (const [i, a] of boxes.entries()) {
      expect(a.x >= -0.5 && a.y >= -0.5 && a.x + a.w <= width + 0.5 && a.y + a.h <= height + 0.5, `${id}: ${a.text} inside`).toBe(true);
      for (const b of boxes.slice(i + 1)) {
        const apart = a.x + a.w <= b.x + 0.5 || b.x + b.w <= a.x + 0.5 || a.y + a.h <= b.y + 0.5 || b.y + b.h <= a.y + 0.5;
        expect(apart, `${id}: "${a.text}" and "${b.text}" overlap`).toBe(true);
      }
    }
  }
  // Every axis of the parallel coordinates is named.
  const names = page.locator('[data-testid="parallel"] svg text');
  await expect(names.filter({ hasText: 'optimizer' })).toHaveCount(1);
  await expect(names.filter({ hasText: /learning_rate/ })).toHaveCount(1);
  await page.screenshot({ path: test.info().outputPath('compare-labels.png'), fullPage: true });
});

test('a run page mounts charts as they scroll in and follows a live run', async ({ page, baseURL, request }) => {
  test.setTimeout(120_000);
  const seeded = seed(baseURL!, `live-${Date.now()}`, 2, 50, '--keys', '40', '--live');
  const [many, live] = seeded.runs;

  // 44 metrics: the first charts are above the fold, at 1440×900 and at
  // the default 1280×720, and only the charts near the viewport are drawn.
  await page.setViewportSize({ width: 1440, height: 900 });
  await page.goto(`/experiments/${seeded.experiment_id}/runs/${many}`);
  await hydrated(page);
  const charts = page.locator('figure.chart');
  await expect(charts).toHaveCount(44);
  await expect(charts.first()).toHaveAttribute('data-series', '1');
  const first = (await charts.first().boundingBox())!;
  expect(first.y + first.height, 'the whole first chart is above the fold').toBeLessThanOrEqual(900);
  await page.setViewportSize({ width: 1280, height: 720 });
  expect((await charts.first().boundingBox())!.y, 'the first chart starts above the fold').toBeLessThan(720 - 100);
  await page.waitForTimeout(500);
  const drawnAtFirst = await page.locator('figure.chart[data-series]').count();
  expect(drawnAtFirst).toBeGreaterThan(0);
  expect(drawnAtFirst).toBeLessThan(44);
  await expect(charts.last()).not.toHaveAttribute('data-series', /.*/);
  await charts.last().scrollIntoViewIfNeeded();
  await expect(charts.last()).toHaveAttribute('data-series', '1');
  // The tables come after the charts.
  const values = (await page.getByTestId('latest').boundingBox())!;
  expect(values.y).toBeGreaterThan((await charts.last().boundingBox())!.y);

  // A live run: what it logs arrives by push, and its end too.
  let polls = 0;
  page.on('request', (r) => {
    if (r.url().includes('/api/get_run_detail')) polls++;
  });
  await page.goto(`/experiments/${seeded.experiment_id}/runs/${live}`);
  await hydrated(page);
  await expect(page.getByTestId('run-status')).toHaveText('RUNNING');
  await page.waitForTimeout(3_000);
  const idle = polls;
  const logged = await request.post('/api/2.0/mlflow/runs/log-batch', {
    data: { run_id: live, metrics: [{ key: 'loss', value: 0.0123, timestamp: Date.now(), step: 10_000 }] },
  });
  expect(logged.status()).toBe(200);
  const lossValues = page.locator('[data-testid="latest"] tr[data-metric="loss"]');
  await expect(lossValues.locator('[data-figure="last"]')).toHaveText('0.0123');
  // The lowest loss so far (the curve stays above 0.05), and where it was.
  await expect(lossValues.locator('[data-figure="min"]')).toHaveText('0.0123 @10000');
  // A metric it had not logged gets its chart; the charts drawn before are
  // redrawn without an error in the page (a chart's answer arriving after
  // it went once panicked).
  const errors: string[] = [];
  page.on('pageerror', (e) => errors.push(e.message));
  page.on('console', (m) => {
    if (m.text().includes('panicked')) errors.push(m.text());
  });
  const before = await charts.count();
  const added = await request.post('/api/2.0/mlflow/runs/log-batch', {
    data: { run_id: live, metrics: [{ key: 'zz_new_metric', value: 5, timestamp: Date.now(), step: 10_001 }] },
  });
  expect(added.status()).toBe(200);
  await expect(charts).toHaveCount(before + 1);
  await expect(page.locator('figure.chart[data-metric="zz_new_metric"]')).toHaveCount(1);
  await page.waitForTimeout(1_000);
  expect(errors).toEqual([]);
  const ended = await request.post('/api/2.0/mlflow/runs/update', {
    data: { run_id: live, status: 'FINISHED', end_time: Date.now() },
  });
  expect(ended.status()).toBe(200);
  await expect(page.getByTestId('run-status')).toHaveText('FINISHED');
  // While nothing happened, nothing was asked: the page waits for pushes.
  expect(idle).toBeLessThanOrEqual(2);
});

test('a run page shows the datasets, models and traces its script logged', async ({ page, baseURL }) => {
  const out = execFileSync(
    python,
    [join(__dirname, '..', 'explorer', 'seed_mlflow3.py'), baseURL!, `mlflow3-${Date.now()}`],
    { encoding: 'utf8', timeout: 120_000, env: { ...process.env, MLFLOW_HTTP_REQUEST_MAX_RETRIES: '0' } },
  );
  const lines = out.trim().split('\n');
  const seeded = JSON.parse(lines[lines.length - 1]);
  await page.goto(`/experiments/${seeded.experiment_id}/runs/${seeded.run_id}`);
  const dataset = page.locator('[data-testid="datasets"] tr[data-dataset="shapes"]');
  await expect(dataset).toContainText('training');
  // The input's own tags beside its context; MLflow's are left out.
  await expect(dataset.getByTestId('dataset-tags')).toHaveText('split=v2');
  await expect(dataset).toContainText('s3://lab/shapes.csv');
  await expect(dataset).toContainText('width (double)');
  await expect(dataset.locator('td.num')).toHaveText('3');
  const model = page.locator('[data-testid="models"] tr[data-model="classifier"]');
  await expect(model).toContainText('ready');
  await expect(model).toContainText('made here');
  await expect(model).toContainText('val_acc 0.875');
  await expect(model).toContainText(seeded.model_id);
  const files = await page.request.get(await model.getByRole('link', { name: 'MLmodel' }).getAttribute('href') ?? '');
  // The model has no files (it was only initialized): the link answers
  // MLflow's not-found, not a page.
  expect(files.status()).toBe(404);
  const trace = page.locator('[data-testid="traces"] tbody tr');
  await expect(trace).toHaveCount(1);
  await expect(trace).toContainText('predict');
  await expect(trace).toContainText('OK');
  await page.screenshot({ path: test.info().outputPath('run-inputs-outputs.png'), fullPage: true });
});

test('a run page shows its text and image artifacts in place', async ({ page, request }) => {
  const created = await request.post('/api/2.0/mlflow/runs/create', {
    data: { experiment_id: '0', run_name: `artifacts-${Date.now()}`, start_time: Date.now() },
  });
  expect(created.status()).toBe(200);
  const run = (await created.json()).run.info.run_id;
  const put = async (path: string, body: Buffer) => {
    const answer = await request.put(`/api/2.0/mlflow-artifacts/artifacts/0/${run}/artifacts/${path}`, { data: body });
    expect(answer.status(), path).toBe(200);
  };
  await put('notes/summary.txt', Buffer.from('val_loss fell to 0.31 at epoch 12\n'));
  // A 2×1 PNG, red then blue.
  await put(
    'plots/pixels.png',
    Buffer.from(
      'iVBORw0KGgoAAAANSUhEUgAAAAIAAAABCAIAAAB7QOjdAAAADUlEQVR4nGP4zwAE/wEHAAH/4iOeWQAAAABJRU5ErkJggg==',
      'base64',
    ),
  );
  await put('weights.bin', Buffer.from([0, 159, 146, 150, 0]));
  await put('eval/predictions.csv', Buffer.from('id,label,score\n1,"cat, tabby",0.9\n2,dog,0.4\n'));
  await page.goto(`/experiments/0/runs/${run}`);
  await hydrated(page);
  const item = (path: string) => page.locator(`[data-testid="artifacts"] li[data-artifact="${path}"]`);

  await item('notes/summary.txt').getByTestId('preview-artifact').click();
  const shown = page.getByTestId('artifact-preview');
  await expect(shown.locator('pre')).toHaveText('val_loss fell to 0.31 at epoch 12');
  await item('plots/pixels.png').getByTestId('preview-artifact').click();
  const image = shown.locator('img');
  await expect(image).toBeVisible();
  await expect.poll(() => image.evaluate((img: HTMLImageElement) => img.naturalWidth)).toBe(2);
  // A CSV as a table, its first row the header.
  await item('eval/predictions.csv').getByTestId('preview-artifact').click();
  const table = shown.getByTestId('artifact-table');
  await expect(table.locator('thead th')).toHaveText(['id', 'label', 'score']);
  await expect(table.locator('tbody tr')).toHaveCount(2);
  await expect(table.locator('tbody tr').first().locator('td')).toHaveText(['1', 'cat, tabby', '0.9']);
  await item('weights.bin').getByTestId('preview-artifact').click();
  await expect(shown).toContainText('Not text');
  await item('weights.bin').getByTestId('preview-artifact').click();
  await expect(shown).toHaveCount(0);
});

test('the links the mlflow client prints open the run', async ({ page, baseURL }) => {
  const seeded = seed(baseURL!, `links-${Date.now()}`, 1, 5);
  const link = seeded.printed.match(/View run \S+ at: (\S+)/)?.[1];
  expect(link, seeded.printed).toMatch(/\/#\/experiments\/\d+\/runs\/[0-9a-f]+$/);
  await page.goto(link!);
  await expect(page).toHaveURL(new RegExp(`/experiments/${seeded.experiment_id}/runs/${seeded.runs[0]}$`));
  await expect(page.getByTestId('run-name')).toHaveText(/lr0\.1-b32-00/);
  // mlflow.genai.evaluate prints its run as an evaluation-runs link.
  const base = link!.split('#')[0];
  await page.goto(`${base}#/experiments/${seeded.experiment_id}/evaluation-runs?selectedRunUuid=${seeded.runs[0]}`);
  await expect(page).toHaveURL(new RegExp(`/experiments/${seeded.experiment_id}/runs/${seeded.runs[0]}$`));
  await expect(page.getByTestId('run-name')).toHaveText(/lr0\.1-b32-00/);
  // A run's tab, a logged model (as log_model prints it) and a registered
  // model's version open the nearest page of ours.
  await page.goto(`${base}#/experiments/${seeded.experiment_id}/runs/${seeded.runs[0]}/artifacts`);
  await expect(page).toHaveURL(new RegExp(`/experiments/${seeded.experiment_id}/runs/${seeded.runs[0]}$`));
  await page.goto(`${base}#/experiments/${seeded.experiment_id}/models/m-0123abcd`);
  await expect(page).toHaveURL(new RegExp(`/models\\?experiment=${seeded.experiment_id}$`));
  await page.goto(`${base}#/models/digits/versions/2`);
  await expect(page).toHaveURL(/\/models$/);
});

test.describe('without JavaScript', () => {
  test.use({ javaScriptEnabled: false });

  test('the explorer pages show their data from the server', async ({ page, baseURL }) => {
    const seeded = seed(baseURL!, `nojs-${Date.now()}`, 3, 20);
    await page.goto('/experiments');
    await expect(page.locator(`[data-testid="experiments"] a[href="/experiments/${seeded.experiment_id}"]`)).toBeVisible();
    await page.goto(`/experiments/${seeded.experiment_id}`);
    await expect(page.getByTestId('match-count')).toHaveText('3 runs');
    await page.getByTestId('query').fill("params.batch = '64'");
    await page.getByTestId('query').press('Enter');
    await expect(page.getByTestId('match-count')).toHaveText('1 run matches');
    await page.locator('[data-testid="runs"] tbody tr[data-run] td.name a').first().click();
    await expect(page.getByTestId('params')).toContainText('batch');
    // Each chart is the server's drawing of it, the same code as the browser's.
    const image = page.locator('figure.chart[data-metric="loss"] img');
    await expect(image).toHaveAttribute('src', /\/api\/trainyard\/v1\/chart\?key=loss/);
    await image.scrollIntoViewIfNeeded();
    await expect.poll(() => image.evaluate((img: HTMLImageElement) => img.naturalWidth)).toBeGreaterThan(0);
    await page.screenshot({ path: test.info().outputPath('run-no-js.png'), fullPage: true });
  });
});

test('the runs table uses the window and keeps names in view; the column picker starts from what is shown', async ({ page, baseURL }) => {
  test.setTimeout(90_000);
  await page.setViewportSize({ width: 1440, height: 900 });
  const seeded = seed(baseURL!, `columns-${Date.now()}`, 4, 20);
  await page.goto(`/experiments/${seeded.experiment_id}`);
  await hydrated(page);
  const table = page.getByTestId('runs');
  // The width of the window, and val_loss in view without scrolling.
  expect((await table.boundingBox())!.width).toBeGreaterThan(1300);
  const valLoss = page.locator('th a[data-sort="metrics.val_loss"]');
  await expect(valLoss).toBeInViewport();
  const right = await valLoss.boundingBox();
  expect(right!.x + right!.width).toBeLessThanOrEqual(1440);
  await page.screenshot({ path: test.info().outputPath('runs-1440.png') });

  // Narrower, the table scrolls sideways and the run's name stays put.
  await page.setViewportSize({ width: 700, height: 900 });
  const name = page.locator('[data-testid="runs"] tbody tr[data-run] td.name').first();
  const before = (await name.boundingBox())!.x;
  await table.evaluate((el) => { el.scrollLeft = 400; });
  await expect.poll(() => table.evaluate((el) => el.scrollLeft)).toBeGreaterThan(100);
  expect(Math.abs((await name.boundingBox())!.x - before)).toBeLessThan(2);
  await page.setViewportSize({ width: 1440, height: 900 });

  // Sorted by val_loss; the picker opens with the shown columns ticked.
  await valLoss.click();
  await expect(page).toHaveURL(/sort=metrics\.val_loss/);
  const picker = page.getByTestId('column-picker');
  const open = async () => {
    if (!(await picker.evaluate((d: HTMLDetailsElement) => d.open))) await picker.locator('summary').click();
  };
  await open();
  const box = (name: string) => picker.locator(`input[name="col"][value="${name}"]`);
  for (const shown of ['metrics.loss', 'metrics.val_loss', 'params.lr', 'params.batch']) {
    await expect(box(shown)).toBeChecked();
  }
  // Taking val_loss away keeps the other metrics and drops its sort.
  await box('metrics.val_loss').uncheck();
  await picker.getByTestId('apply-columns').click();
  await expect(page).not.toHaveURL(/sort=/);
  await expect(page.locator('th a[data-sort="metrics.val_loss"]')).toHaveCount(0);
  await expect(page.locator('th a[data-sort="metrics.loss"]')).toBeVisible();
  await expect(page.locator('th a[data-sort="params.lr"]')).toBeVisible();
  // None, then all that a search finds.
  await open();
  await picker.getByTestId('pick-none').click();
  await picker.getByTestId('find-key').fill('loss');
  await picker.getByTestId('pick-all').click();
  await picker.getByTestId('apply-columns').click();
  await expect(page.locator('th a[data-sort="metrics.val_loss"]')).toBeVisible();
  await expect(page.locator('th a[data-sort="metrics.loss"]')).toBeVisible();
  await expect(page.locator('th a[data-sort="params.lr"]')).toHaveCount(0);
  await expect(page.locator('th a[data-sort="metrics.accuracy"]')).toHaveCount(0);

  // The CSV holds what the table shows: its columns, one line per run.
  const csvLink = page.getByTestId('runs-csv');
  await expect(csvLink).toHaveAttribute('href', /runs\.csv\?.*col=metrics\.loss/);
  const csv = await page.request.get((await csvLink.getAttribute('href'))!);
  expect(csv.status()).toBe(200);
  const lines = (await csv.text()).trim().split('\n');
  expect(lines[0]).toMatch(/^run_id,name,status,user,start_time,end_time,duration_s,.*metrics\.loss/);
  expect(lines[0]).not.toContain('params.lr');
  expect(lines).toHaveLength(5);
});

test('a run is renamed, described and deleted from its page', async ({ page, baseURL }) => {
  const seeded = seed(baseURL!, `edit-${Date.now()}`, 2, 10);
  await page.goto(`/experiments/${seeded.experiment_id}/runs/${seeded.runs[0]}`);
  await hydrated(page);
  await expect(page.getByTestId('run-note')).toHaveCount(0);
  await page.getByTestId('run-edit').locator('summary').click();
  await page.getByTestId('run-edit-name').fill('renamed run');
  // A description is Markdown, as in MLflow's UI; HTML in it is text,
  // never markup.
  const note = 'Baseline with **warmup**.\n<b>not bold</b> [script](javascript:alert(1))';
  await page.getByTestId('run-edit-note').fill(note);
  await page.getByTestId('run-edit-save').click();
  await expect(page.getByTestId('run-name')).toHaveText('renamed run');
  await expect(page.getByTestId('run-note').locator('strong')).toHaveText('warmup');
  await expect(page.getByTestId('run-note')).toContainText('<b>not bold</b>');
  await expect(page.getByTestId('run-note').locator('b')).toHaveCount(0);
  await expect(page.getByTestId('run-note').getByRole('link', { name: 'script' })).toHaveAttribute('href', '#');
  // The mlflow client reads what was written.
  const run = await (await page.request.get(`/api/2.0/mlflow/runs/get?run_id=${seeded.runs[0]}`)).json();
  expect(run.run.info.run_name).toBe('renamed run');
  expect(run.run.data.tags).toContainEqual({ key: 'mlflow.note.content', value: note });
  // A fresh server render shows the description too, and the edit box
  // holds its Markdown.
  await page.reload();
  await expect(page.getByTestId('run-note').locator('strong')).toHaveText('warmup');
  await hydrated(page);
  await page.getByTestId('run-edit').locator('summary').click();
  await expect(page.getByTestId('run-edit-note')).toHaveValue(note);
  await page.getByTestId('run-edit').locator('summary').click();

  // Tags: set one, change it, remove it; system tags keep no button, and
  // a system key is refused with the field named.
  await hydrated(page);
  await page.getByTestId('tag-key').fill('reviewed');
  await page.getByTestId('tag-value').fill('no');
  await page.getByTestId('tag-set').click();
  const reviewed = page.locator('[data-testid="tags"] tr[data-tag="reviewed"]');
  await expect(reviewed).toContainText('no');
  await page.getByTestId('tag-key').fill('reviewed');
  await page.getByTestId('tag-value').fill('yes, by ana');
  await page.getByTestId('tag-set').click();
  await expect(reviewed).toContainText('yes, by ana');
  const tagged = await (await page.request.get(`/api/2.0/mlflow/runs/get?run_id=${seeded.runs[0]}`)).json();
  expect(tagged.run.data.tags).toContainEqual({ key: 'reviewed', value: 'yes, by ana' });
  await expect(page.locator('[data-testid="tags"] tr[data-tag="mlflow.note.content"] button')).toHaveCount(0);
  await page.getByTestId('tag-key').fill('mlflow.user');
  await page.getByTestId('tag-value').fill('someone else');
  await page.getByTestId('tag-set').click();
  await expect(page.locator('.error')).toContainText('system tag');
  await reviewed.getByRole('button', { name: 'Remove the tag reviewed' }).click();
  await expect(reviewed).toHaveCount(0);

  // Deleting asks first, then goes back to the experiment without it.
  page.once('dialog', (d) => void d.accept());
  await page.getByTestId('run-edit').locator('summary').click();
  await page.getByTestId('run-delete').click();
  await expect(page).toHaveURL(new RegExp(`/experiments/${seeded.experiment_id}$`));
  await expect(page.getByTestId('match-count')).toHaveText('1 run');

  // Deleted runs are listed apart, and one comes back from its page.
  await hydrated(page);
  await page.getByTestId('deleted-runs').click();
  await expect(page).toHaveURL(/deleted=1/);
  await expect(page.getByTestId('deleted-runs-hint')).toBeVisible();
  await expect(page.getByTestId('match-count')).toHaveText('1 run');
  await page.locator('.runs-table td.name a', { hasText: 'renamed run' }).click();
  await expect(page.getByTestId('run-name')).toHaveText('renamed run');
  await hydrated(page);
  await page.getByTestId('run-restore').click();
  await expect(page.getByTestId('run-restore')).toHaveCount(0);
  await expect(page.getByTestId('run-edit')).toBeVisible();
  await page.goto(`/experiments/${seeded.experiment_id}`);
  await expect(page.getByTestId('match-count')).toHaveText('2 runs');

  // Deleted again, it is deleted forever from its page, asked first: it
  // leaves the deleted runs, and MLflow no longer knows it.
  const remove = async (run: string) => {
    const answer = await page.request.post('/api/2.0/mlflow/runs/delete', { data: { run_id: run } });
    expect(answer.status(), await answer.text()).toBe(200);
  };
  await remove(seeded.runs[0]);
  await page.goto(`/experiments/${seeded.experiment_id}/runs/${seeded.runs[0]}`);
  await hydrated(page);
  page.once('dialog', (d) => void d.accept());
  await page.getByTestId('run-purge').click();
  await expect(page).toHaveURL(new RegExp(`/experiments/${seeded.experiment_id}\\?deleted=1$`));
  await expect(page.getByTestId('runs-empty')).toHaveText('No deleted runs.');
  expect((await page.request.get(`/api/2.0/mlflow/runs/get?run_id=${seeded.runs[0]}`)).status()).toBe(404);

  // The usage page says what deleted runs hold, and leads to them; the
  // others go all at once from there.
  await remove(seeded.runs[1]);
  await page.goto('/usage');
  await expect(page.getByTestId('storage-artifacts')).toContainText('of 100.0 GiB');
  const held = page.locator(`[data-testid="storage-deleted"] tr[data-experiment="${seeded.experiment_id}"]`);
  await expect(held.locator('td').nth(1)).toHaveText('1');
  await held.locator('a').click();
  await expect(page).toHaveURL(new RegExp(`/experiments/${seeded.experiment_id}\\?deleted=1$`));
  await hydrated(page);
  await expect(page.getByTestId('match-count')).toHaveText('1 run');
  page.once('dialog', (d) => void d.accept());
  await page.getByTestId('purge-deleted-runs').click();
  await expect(page.getByTestId('purge-result')).toContainText('Deleted 1 run forever');
  await expect(page.getByTestId('runs-empty')).toHaveText('No deleted runs.');
  expect((await page.request.get(`/api/2.0/mlflow/runs/get?run_id=${seeded.runs[1]}`)).status()).toBe(404);
});
