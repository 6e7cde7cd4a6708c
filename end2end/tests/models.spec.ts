// What MLflow 3 scripts log besides runs, in Chromium, logged by the
// official mlflow client (explorer/seed_mlflow3.py): the Models page with a
// registered model, its version and alias, and an experiment's logged
// models sorted by a metric; an experiment's traces, filtered by their
// spans, and one trace's span tree with a span's inputs and outputs, what a
// span raised, and its assessments; an experiment's evaluation datasets and
// one dataset's records; its
// registered scorers; and the admin page's registry webhooks.
import { expect, test } from '@playwright/test';
import { execFileSync } from 'node:child_process';
import { homedir } from 'node:os';
import { join } from 'node:path';

const python = join(
  process.env.MLFLOW_VENV ?? join(homedir(), '.cache', 'trainyard', 'mlflow-venv'),
  'bin',
  'python',
);

type Seeded = {
  experiment_id: string;
  run_id: string;
  model_id: string;
  registered: string;
  dataset_id: string;
  trace_id: string;
  prompt: string;
  prompted_experiment_id: string;
  prompted_trace_id: string;
  failing_experiment_id: string;
  failed_trace_id: string;
  otel_experiment_id: string;
  otel_trace_id: string;
};

function seed(baseURL: string): Seeded {
  const out = execFileSync(
    python,
    [join(__dirname, '..', 'explorer', 'seed_mlflow3.py'), baseURL, `models-${Date.now()}`],
    { encoding: 'utf8', timeout: 120_000, env: { ...process.env, MLFLOW_HTTP_REQUEST_MAX_RETRIES: '0' } },
  );
  const lines = out.trim().split('\n');
  return JSON.parse(lines[lines.length - 1]);
}

test('the Models page lists registered versions with aliases and sorts logged models by a metric', async ({ page, baseURL }) => {
  const seeded = seed(baseURL!);
  await page.goto('/models');
  const card = page.locator(`[data-registered="${seeded.registered}"]`);
  await expect(card.getByTestId('aliases')).toHaveText('@champion → v1');
  const version = card.locator('tr[data-version="1"]');
  await expect(version).toContainText('@champion');
  await expect(version).toContainText(`models:/${seeded.model_id}`);
  // The model's tags, and the version's description and tags.
  await expect(card.getByTestId('model-tags')).toHaveText('Tags: task=shapes');
  // Descriptions are Markdown, as in MLflow's UI; HTML in them is text.
  await expect(card.getByTestId('model-note').locator('strong')).toHaveText('shapes');
  await expect(card.getByTestId('model-note')).toContainText('<script>alert(1)</script>');
  await expect(card.locator('script')).toHaveCount(0);
  await expect(version.getByTestId('version-notes')).toContainText('first cut');
  await expect(version.getByTestId('version-notes').locator('em')).toHaveText('unpruned');
  await expect(version.getByTestId('version-notes')).toContainText('validated=yes');
  // The version's source run opens its page.
  await expect(version.getByRole('link')).toHaveAttribute(
    'href',
    `/experiments/${seeded.experiment_id}/runs/${seeded.run_id}`,
  );
  await page.getByTestId('models-experiment').selectOption(seeded.experiment_id);
  await expect(page).toHaveURL(new RegExp(`/models\\?experiment=${seeded.experiment_id}$`));
  const rows = page.locator('[data-testid="logged-models"] tbody tr');
  await expect(rows).toHaveCount(2);
  const sortBy = page.locator('[data-testid="logged-models"] button[data-sort="val_acc"]');
  await sortBy.click();
  await expect(rows.first()).toHaveAttribute('data-model', 'regressor');
  await expect(rows.first()).toContainText('0.91');
  await expect(page.locator('[data-testid="logged-models"] th[aria-sort="descending"]')).toContainText('val_acc');
  await sortBy.click();
  await expect(rows.first()).toHaveAttribute('data-model', 'classifier');
  await expect(rows.first()).toContainText('0.875');
  await expect(rows.first()).toContainText('ready');
  // Opened afresh, a NaN among the models' metrics (which JSON cannot
  // write as a number) leaves the page alive: sorting still works.
  const errors: string[] = [];
  page.on('pageerror', (e) => errors.push(e.message));
  await page.goto(`/models?experiment=${seeded.experiment_id}`);
  await expect(page.locator('tr[data-model="regressor"]')).toContainText('NaN');
  await sortBy.click();
  await expect(rows.first()).toHaveAttribute('data-model', 'regressor');
  expect(errors).toEqual([]);
  await page.screenshot({ path: test.info().outputPath('models.png'), fullPage: true });
});

test("an experiment's traces open to their span tree", async ({ page, baseURL }) => {
  const seeded = seed(baseURL!);
  // From the run's page, its trace links to the trace.
  await page.goto(`/experiments/${seeded.experiment_id}/runs/${seeded.run_id}`);
  await page.locator('[data-testid="traces"] tbody tr').getByRole('link', { name: 'predict' }).click();
  await expect(page.getByTestId('trace-name')).toHaveText('predict');
  await page.goto(`/experiments/${seeded.experiment_id}/traces`);
  const listed = page.locator('[data-testid="trace-list"] tbody tr');
  await expect(listed).toHaveCount(1);
  // The feedback that stands: the person's, not the judge's it overrode.
  await expect(listed.getByTestId('trace-feedback')).toHaveText('correct: true');
  // Filtered by its spans: comparisons joined by AND hold for one span.
  const query = page.getByTestId('trace-query');
  await query.fill("span.type = 'TOOL' AND span.name = 'predict'");
  await query.press('Enter');
  await expect(page.getByTestId('no-traces')).toHaveText('No trace matches this filter.');
  await query.fill("span.duration = '1'");
  await query.press('Enter');
  await expect(page.getByTestId('query-error')).toContainText('span.attributes.<key>');
  await query.fill("span.type = 'TOOL' AND span.name = 'score'");
  await query.press('Enter');
  await expect(page).toHaveURL(/\?q=span\.type/);
  await expect(listed).toHaveCount(1);
  await listed.getByRole('link', { name: 'predict' }).click();
  await expect(page.getByTestId('trace-name')).toHaveText('predict');
  const spans = page.locator('[data-testid="spans"] tbody tr[data-span]');
  await expect(spans).toHaveCount(2);
  await expect(spans.nth(0)).toHaveAttribute('data-span', 'predict');
  await expect(spans.nth(0)).toHaveAttribute('data-depth', '0');
  await expect(spans.nth(1)).toHaveAttribute('data-span', 'score');
  await expect(spans.nth(1)).toHaveAttribute('data-depth', '1');
  await expect(spans.nth(1)).toContainText('TOOL');
  // The child's bar lies inside its parent's.
  const bar = async (i: number) => (await spans.nth(i).locator('.span-bar').boundingBox())!;
  const [parent, child] = [await bar(0), await bar(1)];
  expect(child.x).toBeGreaterThanOrEqual(parent.x - 1);
  expect(child.x + child.width).toBeLessThanOrEqual(parent.x + parent.width + 1);
  await spans.nth(1).getByRole('button', { name: 'score' }).click();
  await expect(page.getByTestId('span-inputs')).toContainText('"width": 0.7');
  await expect(page.getByTestId('span-outputs')).toContainText('1.4');
  // Its own attributes, beside the trace's tags and the run that logged it.
  await expect(page.getByTestId('span-attributes')).toContainText('scale');
  await expect(page.getByTestId('span-attributes')).toContainText('doubled');
  await expect(page.getByTestId('trace-tags')).toContainText('stage');
  await expect(page.getByTestId('trace-tags')).toContainText('canary');
  await expect(page.getByTestId('trace-run')).toHaveAttribute('href', `/experiments/${seeded.experiment_id}/runs/${seeded.run_id}`);
  // Its assessments: the judge's verdict, overridden by a person's, and an
  // expectation.
  const assessments = page.locator('[data-testid="assessments"] tbody tr');
  await expect(assessments).toHaveCount(3);
  const judge = page.locator('[data-testid="assessments"] tr[data-assessment="correct"][data-valid="false"]');
  await expect(judge).toContainText('false');
  await expect(judge).toContainText('llm judge · judge');
  await expect(judge).toContainText('overridden');
  const person = page.locator('[data-testid="assessments"] tr[data-assessment="correct"][data-valid="true"]');
  await expect(person).toContainText('true');
  await expect(person).toContainText('human · ana');
  await expect(person).toContainText('1 is right for 0.7');
  await expect(page.locator('[data-testid="assessments"] tr[data-assessment="expected_label"]')).toContainText('expectation');
  await expect(page.getByTestId('trace-prompts')).toHaveCount(0);
  await page.screenshot({ path: test.info().outputPath('trace.png'), fullPage: true });
  // A trace that loaded a registered prompt names the version it used.
  await page.goto(`/experiments/${seeded.prompted_experiment_id}/traces/${seeded.prompted_trace_id}`);
  await expect(page.getByTestId('trace-prompts')).toHaveText(`Prompts used: ${seeded.prompt} v1`);
  // A span that raised shows what it raised, and where.
  await page.goto(`/experiments/${seeded.failing_experiment_id}/traces/${seeded.failed_trace_id}`);
  const raised = page.locator('[data-testid="spans"] tbody tr[data-span="fetch"]');
  await expect(raised).toHaveClass(/failed/);
  await raised.getByRole('button', { name: 'fetch' }).click();
  const exception = page.getByTestId('span-exception');
  await expect(exception).toContainText('ConnectionError: no route to http://docs.internal');
  await expect(exception).toContainText('Traceback');
  await expect(exception).toContainText('in fetch');
  // A trace an OpenTelemetry exporter is still sending: under way, with
  // the spans that ended so far.
  await page.goto(`/experiments/${seeded.otel_experiment_id}/traces`);
  const sent = page.locator(`[data-testid="trace-list"] tbody tr[data-trace="${seeded.otel_trace_id}"]`);
  await expect(sent).toContainText('in_progress');
  await sent.getByRole('link').click();
  await expect(page).toHaveURL(new RegExp(`/traces/${seeded.otel_trace_id}$`));
  await expect(page.locator('[data-testid="spans"] tbody tr[data-span="search_web"]')).toContainText('TOOL');
});

test("an experiment's evaluation datasets open to their records", async ({ page, baseURL }) => {
  const seeded = seed(baseURL!);
  await page.goto(`/experiments/${seeded.experiment_id}`);
  await page.getByRole('link', { name: 'Datasets' }).click();
  await expect(page).toHaveURL(new RegExp(`/experiments/${seeded.experiment_id}/datasets$`));
  const listed = page.locator('[data-testid="dataset-list"] tbody tr');
  await expect(listed).toHaveCount(1);
  await expect(listed).toHaveAttribute('data-dataset', 'width questions');
  await expect(listed.getByTestId('dataset-records')).toHaveText('2');
  await expect(listed).toContainText('stage: draft');
  await listed.getByRole('link', { name: 'width questions' }).click();
  await expect(page).toHaveURL(new RegExp(`/datasets/${seeded.dataset_id}$`));
  await expect(page.getByTestId('dataset-name')).toHaveText('width questions');
  await expect(page.getByTestId('dataset-count')).toHaveText('2 records');
  await expect(page.getByTestId('dataset-schema')).toContainText('inputs: width (float)');
  // In the order they came: the trace's record first, linking to it.
  const records = page.locator('[data-testid="records"] tbody tr');
  await expect(records).toHaveCount(2);
  await expect(records.nth(0).getByTestId('record-inputs')).toContainText('width');
  await expect(records.nth(0).getByTestId('record-inputs')).toContainText('0.7');
  await expect(records.nth(0).getByTestId('record-outputs')).toContainText('1');
  await expect(records.nth(1).getByTestId('record-expectations')).toContainText('narrow');
  await expect(records.nth(1)).toContainText('checked: yes');
  await expect(records.nth(1).getByTestId('record-source')).toContainText('human');
  await page.screenshot({ path: test.info().outputPath('dataset.png'), fullPage: true });
  await records.nth(0).getByTestId('record-source').getByRole('link', { name: 'trace' }).click();
  await expect(page).toHaveURL(new RegExp(`/traces/${seeded.trace_id}$`));
  await expect(page.getByTestId('trace-name')).toHaveText('predict');
});

test("an experiment's registered scorers show what they check and their earlier versions", async ({ page, baseURL }) => {
  const seeded = seed(baseURL!);
  await page.goto(`/experiments/${seeded.experiment_id}`);
  await page.getByRole('link', { name: 'Scorers' }).click();
  await expect(page).toHaveURL(new RegExp(`/experiments/${seeded.experiment_id}/scorers$`));
  const listed = page.locator('[data-testid="scorer-list"] tbody tr');
  await expect(listed).toHaveCount(2);
  const polite = listed.nth(0);
  await expect(polite).toHaveAttribute('data-scorer', 'polite');
  await expect(polite.getByTestId('scorer-version')).toHaveText('2');
  await expect(polite.getByTestId('scorer-checks')).toContainText('Guidelines');
  await expect(polite.locator('p.checks').first()).toHaveText('Answer politely · Answer in one sentence');
  const earlier = polite.getByTestId('scorer-earlier');
  await expect(earlier.locator('li')).not.toBeVisible();
  await earlier.getByText('1 earlier').click();
  await expect(earlier.locator('li')).toHaveCount(1);
  await expect(earlier.locator('li')).toContainText('v1');
  await expect(earlier.locator('li p.checks')).toHaveText('Answer politely');
  const judge = listed.nth(1);
  await expect(judge).toHaveAttribute('data-scorer', 'width check');
  await expect(judge.getByTestId('scorer-version')).toHaveText('1');
  await expect(judge.getByTestId('scorer-checks')).toContainText('make_judge');
  await expect(judge.getByTestId('scorer-checks')).toContainText('openai:/gpt-4o-mini');
  await expect(judge.getByTestId('scorer-checks')).toContainText('Does {{ outputs }} match the width');
  await expect(judge.getByTestId('scorer-earlier')).toHaveCount(0);
  await page.screenshot({ path: test.info().outputPath('scorers.png'), fullPage: true });
});

test("the admin page shows the registry's webhooks and what was sent to each", async ({ page, request }) => {
  const name = `deployer-${Date.now()}`;
  const made = await request.post('/api/2.0/mlflow/webhooks', {
    data: {
      name,
      url: 'http://127.0.0.1:9/hooks/registry',
      description: 'deploys the champion',
      events: [{ entity: 'REGISTERED_MODEL', action: 'CREATED' }],
      secret: 'k',
    },
  });
  expect(made.ok(), await made.text()).toBeTruthy();
  const id = (await made.json()).webhook.webhook_id;
  const model = await request.post('/api/2.0/mlflow/registered-models/create', { data: { name } });
  expect(model.ok(), await model.text()).toBeTruthy();
  try {
    await page.goto('/admin');
    const card = page.locator(`[data-webhook="${name}"]`);
    await expect(card).toContainText('http://127.0.0.1:9/hooks/registry');
    await expect(card).toContainText('ACTIVE');
    await expect(card).toContainText('deploys the champion');
    await expect(card).toContainText('Events: registered_model.created');
    // The event was queued as the model was made, and its first try found
    // nothing listening: it waits to be tried again, saying why (listed with
    // the events of models that other tests made meanwhile).
    const delivery = card.getByTestId('deliveries').locator('tbody tr').last();
    await expect(delivery).toContainText('registered_model.created');
    await expect(async () => {
      await page.reload();
      await expect(delivery).toContainText('Connection refused', { timeout: 1_000 });
    }).toPass({ timeout: 20_000 });
    await expect(delivery.locator('.badge')).toHaveText('pending');
    await page.screenshot({ path: test.info().outputPath('webhooks.png'), fullPage: true });
    // Turned off, what waited for it fails, saying why; turned on again.
    await card.getByTestId('switch-webhook').click();
    await expect(card).toContainText('DISABLED');
    await expect(delivery.locator('.badge')).toHaveText('failed');
    await expect(delivery).toContainText('the webhook was disabled before this was delivered');
    await expect(card.getByTestId('switch-webhook')).toHaveText('Turn on');
    await card.getByTestId('switch-webhook').click();
    await expect(card).toContainText('ACTIVE');
    const api = await request.get(`/api/2.0/mlflow/webhooks/${id}`);
    expect((await api.json()).webhook.status).toBe('ACTIVE');
  } finally {
    await request.delete(`/api/2.0/mlflow/webhooks/${id}`);
  }
});
