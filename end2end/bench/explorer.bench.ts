// make bench-explorer: the explorer's speed in Chromium against the release
// server, on data loaded through the API: 10,000 runs in one experiment, and
// 100 runs with 4 metrics of 100,000 points each. It times
//  (a) the experiment page until it is interactive (rows drawn, hydrated, the
//      keyboard moves through them) and a jump to the middle of the runs,
//  (b) the compare view of 10 runs × 4 metrics until every chart is drawn,
//  (c) a zoom (drag) until the re-queried range is drawn,
// each several times, and prints the median beside the target.
// This is a measurement, not a test: nothing here fails on a slow machine.
import { expect, test, type Page } from '@playwright/test';

const RUNS = Number(process.env.BENCH_RUNS ?? 10_000);
const HEAVY_RUNS = Number(process.env.BENCH_HEAVY_RUNS ?? 100);
const POINTS = Number(process.env.BENCH_POINTS ?? 100_000);
const METRICS = ['loss', 'val_loss', 'accuracy', 'grad_norm'];
const REPEAT = Number(process.env.BENCH_REPEAT ?? 5);

/** Posts to the MLflow API with Node's own fetch (not Playwright's request
 * context, whose every call crosses to the driver process). */
async function post(base: string, path: string, body: object | string) {
  const r = await fetch(`${base}/api/2.0/mlflow/${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  if (r.status !== 200) throw new Error(`${path}: ${r.status} ${await r.text()}`);
  return r.json();
}

/** Runs `task(i)` for i in 0..n, `width` at a time. */
async function pool(n: number, width: number, task: (i: number) => Promise<void>) {
  let next = 0;
  await Promise.all(
    Array.from({ length: width }, async () => {
      while (next < n) await task(next++);
    }),
  );
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor((s.length - 1) / 2)];
}

async function hydrated(page: Page) {
  await expect(async () => {
    const grid = page.getByTestId('runs');
    await grid.focus();
    await grid.press('Home');
    await expect(page.locator('tr.focused')).toHaveCount(1, { timeout: 200 });
  }).toPass({ timeout: 30_000, intervals: [20] });
}

test('explorer speed', async ({ page, baseURL }) => {
  test.setTimeout(3_600_000);
  const base = baseURL!;
  const started = Date.now();
  const many = (await post(base, 'experiments/create', { name: `bench-many-${started}` })).experiment_id;
  await pool(RUNS, 16, async (i) => {
    const run = (await post(base, 'runs/create', { experiment_id: many, run_name: `run-${i}`, start_time: started }))
      .run.info.run_id;
    await post(base, 'runs/log-batch', {
      run_id: run,
      params: [{ key: 'lr', value: String([0.1, 0.01, 0.001][i % 3]) }, { key: 'batch', value: String(32 << (i % 3)) }],
      metrics: [{ key: 'loss', value: 1 / (i + 1), timestamp: started, step: 0 }],
    });
  });
  const heavy = (await post(base, 'experiments/create', { name: `bench-heavy-${started}` })).experiment_id;
  const heavyRuns: string[] = [];
  for (let i = 0; i < HEAVY_RUNS; i++) {
    heavyRuns.push(
      (await post(base, 'runs/create', { experiment_id: heavy, run_name: `heavy-${i}`, start_time: started })).run.info
        .run_id,
    );
  }
  const batches = POINTS / 1000;
  await pool(HEAVY_RUNS * METRICS.length * batches, 8, async (job) => {
    const run = Math.floor(job / (METRICS.length * batches));
    const key = METRICS[Math.floor(job / batches) % METRICS.length];
    const first = (job % batches) * 1000;
    // The body as text: building 1,000 objects to stringify them is the
    // slow part of loading 40 million points.
    let metrics = '';
    for (let k = 0; k < 1000; k++) {
      const step = first + k;
      const value = Math.exp(-step / 20_000) * (1 + 0.1 * Math.sin(step / 50 + run));
      metrics += `${k ? ',' : ''}{"key":"${key}","value":${value},"timestamp":${started + step},"step":${step}}`;
    }
    await post(base, 'runs/log-batch', `{"run_id":"${heavyRuns[run]}","metrics":[${metrics}]}`);
  });
  const loaded = (Date.now() - started) / 1000;

  // (a) The experiment page with 10,000 runs.
  const experimentMs: number[] = [];
  const jumpMs: number[] = [];
  for (let i = 0; i < REPEAT; i++) {
    await page.goto('about:blank');
    const t0 = Date.now();
    await page.goto(`/experiments/${many}`);
    await hydrated(page);
    experimentMs.push(Date.now() - t0);
    await expect(page.getByTestId('match-count')).toHaveText(`${RUNS} runs`);
    const t1 = Date.now();
    await page.getByTestId('runs').evaluate((el, rows) => (el.scrollTop = (rows / 2) * 34), RUNS);
    await expect(page.locator(`tr[aria-rowindex="${RUNS / 2 + 1}"]`)).toBeVisible({ timeout: 30_000 });
    jumpMs.push(Date.now() - t1);
  }

  // (b) 10 runs × 4 metrics, every chart drawn; (c) a zoom re-queried and drawn.
  const query = heavyRuns.slice(0, 10).map((r) => `run=${r}`).join('&') + '&' + METRICS.map((m) => `metric=${m}`).join('&');
  const compareMs: number[] = [];
  const zoomMs: number[] = [];
  for (let i = 0; i < REPEAT; i++) {
    await page.goto('about:blank');
    const t0 = Date.now();
    await page.goto(`/compare?${query}`);
    for (const m of METRICS) {
      await expect(page.locator(`figure.chart[data-metric="${m}"]`)).toHaveAttribute('data-series', '10', { timeout: 60_000 });
    }
    compareMs.push(Date.now() - t0);
    const chart = page.locator('figure.chart[data-metric="loss"]');
    const area = chart.locator('.chart-area');
    const box = (await area.boundingBox())!;
    const before = Number(await chart.getAttribute('data-loads'));
    await page.mouse.move(box.x + box.width * 0.45, box.y + box.height / 2);
    await page.mouse.down();
    await page.mouse.move(box.x + box.width * 0.55, box.y + box.height / 2, { steps: 2 });
    const t1 = Date.now();
    await page.mouse.up();
    await expect(chart).toHaveAttribute('data-loads', String(before + 1), { timeout: 30_000 });
    await expect(chart).toHaveAttribute('data-zoomed', 'true');
    zoomMs.push(Date.now() - t1);
  }

  const rows: [string, number, string][] = [
    [`(a) experiment page interactive, ${RUNS.toLocaleString('en')} runs`, median(experimentMs), '≤ 1500 ms'],
    ['(a) jump to the middle row and draw it', median(jumpMs), '–'],
    [`(b) compare view drawn, 10 runs × 4 metrics of ${POINTS.toLocaleString('en')} points`, median(compareMs), '≤ 1000 ms'],
    ['(c) zoom: drag to the range drawn at full budget', median(zoomMs), '≤ 300 ms'],
  ];
  console.log(`\nloaded ${RUNS} runs and ${HEAVY_RUNS} × ${METRICS.length} × ${POINTS} points through the API in ${loaded.toFixed(0)} s`);
  console.log(`medians of ${REPEAT}, Chromium headless, release server on SQLite:\n`);
  console.log('| measure | Trainyard | target |\n|---|---|---|');
  for (const [name, ms, target] of rows) console.log(`| ${name} | ${ms.toFixed(0)} ms | ${target} |`);
  console.log(
    `\nall samples (ms): experiment ${experimentMs.join(', ')}; jump ${jumpMs.join(', ')}; compare ${compareMs.join(', ')}; zoom ${zoomMs.join(', ')}`,
  );
});
