// GPU telemetry in a real browser: a job holding the (simulated) GPU at
// 0 % shows on Admin → GPUs (heatmap, table with its job), on its node's
// charts (drawn in the page, zoomed by a drag) and on its own page, and is
// flagged idle once it stayed below the threshold for the idle time. A
// node gone for good is removed from its page.
import { expect, test } from '@playwright/test';

// The viridis colour of 0 % utilization (crates/charts' heat_color).
const IDLE_FILL = 'fill="#440154"';

test('a held but idle GPU is drawn and flagged for the admin and the owner', async ({ page, request }) => {
  // The flag needs a minute of samples (TRAINYARD_GPU_IDLE_MINUTES=1).
  test.setTimeout(180_000);
  const submitted = await request.post('/api/trainyard/v1/jobs', {
    data: {
      name: 'holds the GPU, does nothing',
      command: 'sleep 300',
      resources: { gpus: 1, memory: '64Mi' },
      env: { SIMULATED_GPU_UTIL: '0' },
    },
  });
  expect(submitted.status(), await submitted.text()).toBe(201);
  const id: number = (await submitted.json()).job.id;
  try {
    await expect(async () => {
      const job = await (await request.get(`/api/trainyard/v1/jobs/${id}`)).json();
      expect(job.job.state).toBe('RUNNING');
    }).toPass({ timeout: 60_000 });

    // Admin → GPUs: the heatmap and the GPU with its job.
    await page.goto('/admin');
    await page.getByTestId('admin-gpus').click();
    await expect(page).toHaveURL(/\/admin\/gpus$/);
    await expect(page.getByTestId('gpus-summary')).toContainText('1 GPU on 1 node: 1 held by jobs');
    const row = page.locator('[data-testid="gpus"] tr[data-gpu="0"]');
    await expect(row.getByRole('link', { name: `#${id}` })).toBeVisible();
    await expect(row.getByTestId('gpu-util')).toContainText('%');
    const heatmap = page.getByTestId('heatmap').locator('img');
    await expect.poll(() => heatmap.evaluate((img: HTMLImageElement) => img.naturalWidth)).toBeGreaterThan(0);
    const svg = await (await request.get((await heatmap.getAttribute('src'))!)).text();
    expect(svg).toContain('GPU utilization, 1 GPUs');
    // The idle GPU's row is drawn in the colour of 0 %.
    await expect
      .poll(async () => (await (await request.get((await heatmap.getAttribute('src'))!)).text()).includes(IDLE_FILL))
      .toBe(true);
    await page.screenshot({ path: test.info().outputPath('admin-gpus.png'), fullPage: true });
    await page.getByRole('link', { name: '6h' }).click();
    await expect(page).toHaveURL(/window=6h$/);
    await expect(heatmap).toHaveAttribute('src', /window=6h/);

    // The node's charts, from a click on its rows of the heatmap.
    const node = page.locator('a.heat-node').first();
    const nodeName = await node.getAttribute('data-node');
    await node.click();
    await expect(page).toHaveURL(new RegExp(`/admin/gpus/${nodeName}`));
    const util = page.locator('figure.chart[data-quantity="utilization"]');
    await expect(util).toHaveAttribute('data-points', /^[1-9]\d*$/, { timeout: 20_000 });
    for (const q of ['memory', 'temperature', 'power']) {
      await expect(page.locator(`figure.chart[data-quantity="${q}"] polyline`)).toHaveCount(1);
    }
    await page.screenshot({ path: test.info().outputPath('node-gpus.png'), fullPage: true });
    // A drag zooms every chart of the node; a click on Reset zoom undoes it.
    const area = util.locator('.chart-area');
    const box = (await area.boundingBox())!;
    await page.mouse.move(box.x + box.width * 0.55, box.y + box.height / 2);
    await page.mouse.down();
    await page.mouse.move(box.x + box.width * 0.9, box.y + box.height / 2, { steps: 5 });
    await page.mouse.up();
    await expect(page.locator('figure.chart[data-quantity="power"]')).toHaveAttribute('data-zoomed', 'true');
    await page.getByTestId('reset-zoom').click();
    await expect(util).toHaveAttribute('data-zoomed', 'false');
    const png = await request.get((await util.getByRole('link', { name: 'PNG' }).getAttribute('href'))!);
    expect(png.headers()['content-type']).toBe('image/png');

    // The job's own page: its GPU's utilization and memory, then the flag.
    await page.goto(`/jobs/${id}`);
    const mine = page.getByTestId('job-gpus');
    await expect(mine.locator('figure.chart[data-quantity="utilization"]')).toHaveAttribute('data-points', /^[1-9]\d*$/);
    await expect(mine.locator('figure.chart[data-quantity="memory"] polyline')).toHaveCount(1);
    await expect(page.getByTestId('job-gpus-idle')).toBeVisible({ timeout: 120_000 });
    await page.screenshot({ path: test.info().outputPath('job-gpus.png'), fullPage: true });
    await page.goto('/admin/gpus');
    await expect(page.locator('[data-testid="gpus"] tr[data-gpu="0"]').getByTestId('gpu-idle')).toBeVisible();
  } finally {
    await request.post(`/api/trainyard/v1/jobs/${id}/cancel`, { data: {} });
  }
});

test('an admin removes a node that is gone for good from its page', async ({ page, request }) => {
  const node = 'gpu-gone-e2e';
  const made = await request.post(`/api/trainyard/v1/nodes/${node}/tokens`);
  expect(made.status(), await made.text()).toBe(201);
  const headers = { Authorization: `Bearer ${(await made.json()).secret}` };
  const gpu = { index: 0, uuid: 'GPU-e2e-gone-0', name: 'A100', memory_total_bytes: 1 };
  const registered = await request.post('/api/trainyard/v1/agent/register', { headers, data: { node, gpus: [gpu] } });
  expect(registered.status(), await registered.text()).toBe(200);
  const readings = () => ({
    readings: [{
      t_ms: Date.now(),
      gpus: [{
        index: 0, uuid: gpu.uuid, gpu_util: 50, mem_util: 0, mem_used_bytes: 0, mem_total_bytes: 1,
        temperature_c: 30, power_mw: 1, power_limit_mw: 1, sm_clock_mhz: 1, mem_clock_mhz: 1,
        ecc_corrected: null, ecc_uncorrected: null, processes: [],
      }],
    }],
  });
  const pushed = await request.post('/api/trainyard/v1/agent/readings', { headers, data: readings() });
  expect((await pushed.json()).kept).toBe(1);

  await page.goto(`/admin/gpus/${node}`);
  await expect(page.locator('figure.chart[data-quantity="utilization"]')).toHaveAttribute('data-points', '1');
  await page.getByTestId('node-remove').locator('summary').click();
  // With the page's script the browser asks first; the form works without it.
  page.once('dialog', (d) => void d.accept());
  await page.getByTestId('node-remove-button').click();
  await expect(page).toHaveURL(/\/admin\/gpus$/);
  expect(await (await request.get('/api/trainyard/v1/gpus')).text()).not.toContain(gpu.uuid);
  // Its agent's token went with it.
  const after = await request.post('/api/trainyard/v1/agent/readings', { headers, data: readings() });
  expect(after.status()).toBe(401);
});

test('an admin makes a node agent token on the admin page and revokes it', async ({ page, request }) => {
  const node = 'gpu-agent-e2e';
  await page.goto('/admin');
  const form = page.getByTestId('make-node-token');
  await form.locator('input[name="node"]').fill(node);
  await form.getByRole('button', { name: 'Make a node token' }).click();
  await expect(page.getByTestId('new-node-token')).toContainText(node);
  const secret = await page.getByTestId('node-token-secret').inputValue();
  expect(secret).toMatch(/^ty_/);
  // The command to run on the node, with this server's address.
  const command = page.getByTestId('node-agent-command');
  await expect(command).toContainText(`trainyard agent --server ${new URL(page.url()).origin} --node ${node}`);
  const register = (token: string) =>
    request.post('/api/trainyard/v1/agent/register', {
      headers: { Authorization: `Bearer ${token}` },
      data: { node, gpus: [] },
    });
  expect((await register(secret)).status()).toBe(200);
  const row = page.getByTestId('node-tokens').locator(`tr[data-node="${node}"]`);
  await expect(row).toHaveCount(1);
  await expect(row).toContainText(secret.slice(0, 8));
  // Revoked, asked first: its agent is refused.
  page.once('dialog', (d) => void d.accept());
  await row.getByTestId('revoke-node-token').click();
  await expect(row).toHaveCount(0);
  expect((await register(secret)).status()).toBe(401);
  // This server's own machine samples its GPUs itself: refused, saying why.
  const nodes = await (await request.get('/api/trainyard/v1/nodes')).json();
  await form.locator('input[name="node"]').fill(nodes.nodes[0].name);
  await form.getByRole('button', { name: 'Make a node token' }).click();
  await expect(page.getByTestId('node-token-error')).toContainText("this server's own machine");
});
