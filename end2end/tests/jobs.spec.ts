// Jobs in a real browser: the demo template submitted from the catalog runs
// and streams its log live; a command of one's own is cancelled mid-run; a
// job waiting for the only GPU shows its place and reason; a wrong field is
// marked on the form; the pages read without JavaScript.
import { expect, test, type APIRequestContext, type Page } from '@playwright/test';
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

async function submitByApi(request: APIRequestContext, spec: object): Promise<number> {
  const response = await request.post('/api/trainyard/v1/jobs', { data: spec });
  expect(response.status(), await response.text()).toBe(201);
  return (await response.json()).job.id;
}

async function cancelByApi(request: APIRequestContext, id: number) {
  await request.post(`/api/trainyard/v1/jobs/${id}/cancel`, { data: {} });
}

/** Waits on the job's page until its state badge reads `label`. */
async function expectState(page: Page, label: string, timeout = 30_000) {
  await expect(page.getByTestId('job-state')).toHaveText(label, { timeout });
}

test('the demo template runs from the catalog and its log streams live', async ({ page }) => {
  // The first run on a machine installs mlflow and numpy into the cached environment.
  test.setTimeout(300_000);
  await page.goto('/templates');
  const demo = page.locator('[data-template="cpu-demo"]');
  await expect(demo).toContainText('CPU demo');
  // Code in a description reads as code, not as backticks.
  const byo = page.locator('[data-template="byo-script"]');
  await expect(byo.locator('code')).toHaveText('with mlflow.start_run():');
  await expect(byo).not.toContainText('`');
  await demo.getByRole('link', { name: 'Use this template' }).click();
  await expect(page).toHaveURL(/\/submit\?template=cpu-demo$/);

  const form = page.getByTestId('submit-job');
  await form.locator('input[name="form[name]"]').fill('demo from the browser');
  await form.locator('input[name="form[hp][epochs]"]').fill('80');
  await form.locator('input[name="form[hp][delay]"]').fill('0.25');
  await page.screenshot({ path: test.info().outputPath('submit-form.png'), fullPage: true });
  await expect(async () => {
    await form.getByRole('button', { name: 'Submit' }).click();
    await expect(page).toHaveURL(/\/jobs\/\d+$/, { timeout: 2_000 });
  }).toPass({ timeout: 20_000 });
  await expect(page.getByRole('heading', { name: 'demo from the browser' })).toBeVisible();
  await expect(page.getByTestId('job-resources')).toHaveText('1 CPU · 1.0 GiB');

  // Running, with the log arriving while it runs, then finished.
  await expectState(page, 'Running', 240_000);
  // Where it runs: the local executor's one node, this machine.
  const host = readFileSync('/proc/sys/kernel/hostname', 'utf8').trim();
  await expect(page.getByTestId('job-node')).toHaveText(host || 'local');
  await expect(page.getByTestId('job-pod')).toHaveCount(0);
  // What it started from: the template's files, as a tar archive.
  const files = await page.request.get((await page.getByTestId('job-files').getAttribute('href'))!);
  expect(files.status()).toBe(200);
  expect(files.headers()['content-type']).toBe('application/x-tar');
  expect((await files.body()).includes(Buffer.from('train.py'))).toBe(true);
  const log = page.getByTestId('log');
  await expect(log).toContainText(/epoch \d+\/80/, { timeout: 60_000 });
  await expect(page.getByTestId('job-state')).toHaveText('Running');
  // The job's own page draws its loss as it trains, and keeps drawing.
  const jobLoss = page.getByTestId('job-charts').locator('figure.chart[data-metric="loss"]');
  await jobLoss.scrollIntoViewIfNeeded({ timeout: 30_000 });
  await expect(jobLoss).toHaveAttribute('data-series', '1', { timeout: 30_000 });
  await expect(page.getByTestId('job-charts').locator('figure.chart')).toHaveCount(2);
  const loadsBefore = Number(await jobLoss.getAttribute('data-loads'));
  await expect.poll(async () => Number(await jobLoss.getAttribute('data-loads')), { timeout: 30_000 }).toBeGreaterThan(loadsBefore);

  // Its run, in another tab: the loss curve draws, and grows by the server's pushes.
  const runPage = await page.context().newPage();
  await runPage.goto((await page.getByTestId('job-run').getAttribute('href'))!);
  const lossChart = runPage.locator('figure.chart[data-metric="loss"]');
  await lossChart.scrollIntoViewIfNeeded({ timeout: 30_000 });
  await expect(lossChart).toHaveAttribute('data-series', '1', { timeout: 30_000 });
  await expect(lossChart.locator('.chart-svg svg polyline')).toHaveCount(1);
  await expect.poll(async () => Number(await lossChart.getAttribute('data-loads')), { timeout: 30_000 }).toBeGreaterThan(1);
  await expect(runPage.getByTestId('run-job')).toHaveAttribute('href', new RegExp(`${new URL(page.url()).pathname}$`));
  await expect(runPage.getByTestId('run-status')).toHaveText('FINISHED', { timeout: 60_000 });
  await runPage.screenshot({ path: test.info().outputPath('demo-run.png'), fullPage: true });
  await runPage.close();
  await expectState(page, 'Succeeded', 60_000);
  // The tab says so too, for whoever looks elsewhere meanwhile.
  await expect(page).toHaveTitle(/^Succeeded · Job \d+ · /);
  await expect(log).toContainText('epoch 80/80');
  await expect(page.getByTestId('events')).toContainText('exited with code 0');
  if (process.getuid?.() === 0) {
    // As root the server holds each job to its resources in a control group,
    // and its end says what it used.
    await expect(page.getByTestId('events')).toContainText(/peak memory [\d.]+ [KMG]iB of 1\.0 GiB/);
  }
  await page.screenshot({ path: test.info().outputPath('demo-job.png'), fullPage: true });
});

test('a command of its own is cancelled mid-run', async ({ page }) => {
  await page.goto('/submit');
  const form = page.getByTestId('submit-job');
  await form.locator('input[name="form[name]"]').fill('sleeper');
  // The example names the interpreter this machine has (python3).
  await expect(form.locator('textarea[name="form[command]"]')).toHaveAttribute('placeholder', /^python3 /);
  await form.locator('textarea[name="form[command]"]').fill('echo "started $TRAINYARD_JOB_ID"; sleep 120');
  await expect(async () => {
    await form.getByRole('button', { name: 'Submit' }).click();
    await expect(page).toHaveURL(/\/jobs\/\d+$/, { timeout: 2_000 });
  }).toPass({ timeout: 20_000 });
  await expectState(page, 'Running');
  await expect(page.getByTestId('log')).toContainText('started');
  // Cancelling asks first; declined, the job runs on.
  let asked = '';
  page.once('dialog', (d) => { asked = d.message(); void d.dismiss(); });
  await page.getByTestId('cancel').click();
  await expect.poll(() => asked).toContain('Cancel job');
  expect(asked).toContain('Run again');
  await page.waitForTimeout(1_500);
  await expectState(page, 'Running');
  await expect(page.getByTestId('cancel')).toHaveText('Cancel');
  page.once('dialog', (d) => void d.accept());
  await page.getByTestId('cancel').click();
  await expectState(page, 'Cancelled');
  await expect(page.getByTestId('events')).toContainText('cancelled');

  // Run again: a new job with the same command, on its own page.
  const first = page.url();
  await page.getByTestId('retry').click();
  await expect(page).not.toHaveURL(first);
  await expect(page).toHaveURL(/\/jobs\/\d+$/);
  await expectState(page, 'Running');
  await expect(page.getByTestId('events')).toContainText('a retry of job');
  page.once('dialog', (d) => void d.accept());
  await page.getByTestId('cancel').click();
  await expectState(page, 'Cancelled');
});

test("the browser tells the reader of a job's page when it ends", async ({ page, request }) => {
  // The browser's own notifications, allowed for the site, and each one
  // made noted for the test to read.
  await page.context().grantPermissions(['notifications']);
  await page.addInitScript(() => {
    const told: { title: string; body?: string }[] = [];
    (window as unknown as { told: typeof told }).told = told;
    const Real = window.Notification;
    class Noted extends Real {
      constructor(title: string, options?: NotificationOptions) {
        told.push({ title, body: options?.body });
        super(title, options);
      }
    }
    window.Notification = Noted;
  });
  const id = await submitByApi(request, {
    name: 'ends by itself',
    command: 'sleep 10; exit 2',
    resources: { memory: '64Mi' },
  });
  await page.goto(`/jobs/${id}`);
  // Offered once the page is live (it needs JavaScript), before the end.
  await page.getByTestId('notify-end').click();
  await expect(page.getByTestId('notify-end-on')).toBeVisible();
  await expectState(page, 'Failed', 60_000);
  const told = () => page.evaluate(() => (window as unknown as { told: object[] }).told);
  await expect.poll(told).toEqual([{ title: `Job ${id} failed`, body: 'ends by itself · exit code 2' }]);
  // Once, and the offer is gone with the job's end.
  await page.waitForTimeout(2_500);
  expect(await told()).toHaveLength(1);
  await expect(page.getByTestId('notify-end')).toHaveCount(0);
});

test('the log follows its tail unless the reader scrolled up', async ({ page }) => {
  await page.goto('/submit');
  const form = page.getByTestId('submit-job');
  await form.locator('input[name="form[name]"]').fill('chatty');
  await form
    .locator('textarea[name="form[command]"]')
    .fill('for i in $(seq 1 400); do echo "line $i of a long log"; sleep 0.05; done; sleep 120');
  await expect(async () => {
    await form.getByRole('button', { name: 'Submit' }).click();
    await expect(page).toHaveURL(/\/jobs\/\d+$/, { timeout: 2_000 });
  }).toPass({ timeout: 20_000 });
  const log = page.getByTestId('log');
  const atEnd = () =>
    log.evaluate((el) => el.scrollHeight > el.clientHeight && el.scrollTop + el.clientHeight >= el.scrollHeight - 24);
  // The box is focusable (it scrolls) and named.
  await expect(log).toHaveAttribute('tabindex', '0');
  await expect(log).toHaveAttribute('aria-label', /log/);
  // New lines keep the end in view.
  await expect(log).toContainText('line 120 ', { timeout: 60_000 });
  await expect.poll(atEnd).toBe(true);
  await expect(log).toContainText('line 160 ', { timeout: 30_000 });
  await expect.poll(atEnd).toBe(true);
  // Scrolled up to read, it stays where the reader is.
  await log.evaluate((el) => { el.scrollTop = 0; });
  await expect(log).toContainText('line 220 ', { timeout: 30_000 });
  expect(await log.evaluate((el) => el.scrollTop)).toBe(0);
  // Back at the end, it follows again.
  await log.evaluate((el) => { el.scrollTop = el.scrollHeight; });
  await expect(log).toContainText('line 300 ', { timeout: 30_000 });
  await expect.poll(atEnd).toBe(true);
  page.once('dialog', (d) => void d.accept());
  await page.getByTestId('cancel').click();
  await expectState(page, 'Cancelled');
});

test('the job page follows a retry to its new attempt', async ({ page, request }) => {
  const id = await submitByApi(request, {
    name: 'fails once',
    command:
      'if [ -e "$TRAINYARD_CHECKPOINT_DIR/tried" ]; then echo "second attempt runs"; else touch "$TRAINYARD_CHECKPOINT_DIR/tried"; echo "first attempt runs"; sleep 8; exit 3; fi',
    retries: 1,
    resources: { memory: '64Mi' },
  });
  await page.goto(`/jobs/${id}`);
  const log = page.getByTestId('log');
  await expect(log).toContainText('first attempt runs', { timeout: 30_000 });
  await expectState(page, 'Succeeded', 60_000);
  // The log shown is the new attempt's, without a reload.
  await expect(log).toContainText('second attempt runs');
  await expect(log).not.toContainText('first attempt runs');
});

test('a job out of time is resumed from its checkpoints, and kept ones can be deleted', async ({ page, request }) => {
  const resumable = (name: string) => ({
    name,
    command:
      'if [ -e "$TRAINYARD_CHECKPOINT_DIR/step" ]; then echo "resumed at step $(cat "$TRAINYARD_CHECKPOINT_DIR/step")"; else echo 7 > "$TRAINYARD_CHECKPOINT_DIR/step"; echo saved; sleep 60; fi',
    max_runtime: '3s',
    resources: { memory: '64Mi' },
  });
  const byButton = await submitByApi(request, resumable('resumed by its button'));
  const byForm = await submitByApi(request, resumable('resumed by the form'));
  const dropped = await submitByApi(request, {
    name: 'dropped',
    command: 'echo 1 > "$TRAINYARD_CHECKPOINT_DIR/x"; exit 1',
    resources: { memory: '64Mi' },
  });

  // "Resume from them": a new job that starts where this one stopped.
  await page.goto(`/jobs/${byButton}`);
  await expectState(page, 'Failed', 60_000);
  await expect(page.getByTestId('job-checkpoints')).toContainText('2 B kept until');
  await page.getByTestId('resume').click();
  await expect(page).toHaveURL(/\/jobs\/\d+$/);
  expect(page.url()).not.toContain(`/jobs/${byButton}`);
  await expectState(page, 'Succeeded', 60_000);
  await expect(page.getByTestId('log')).toContainText('resumed at step 7');
  await expect(page.getByTestId('job-resumed-from')).toContainText(`job #${byButton}`);
  await expect(page.getByTestId('events')).toContainText(`resuming from the checkpoints of job ${byButton}`);

  // Listed in one's storage while kept, each linked to its job.
  await page.goto('/usage');
  const listed = page.getByTestId('storage-checkpoints');
  await expect(listed.locator(`tr[data-job="${byForm}"]`)).toBeVisible({ timeout: 30_000 });
  await expect(listed.locator(`tr[data-job="${byButton}"]`)).toHaveCount(0);

  // "Edit and resume": the form, filled, with the box ticked.
  await page.goto(`/jobs/${byForm}`);
  await page.getByTestId('edit-resume').click();
  await expect(page).toHaveURL(/\/submit\?from=\d+&resume=1$/);
  const form = page.getByTestId('submit-job');
  await expect(form.getByTestId('resume-from')).toBeChecked();
  await form.locator('input[name="form[name]"]').fill('resumed by the form, renamed');
  await form.getByRole('button', { name: 'Submit' }).click();
  await expect(page).toHaveURL(/\/jobs\/\d+$/);
  await expectState(page, 'Succeeded', 60_000);
  await expect(page.getByTestId('log')).toContainText('resumed at step 7');
  await page.goto(`/jobs/${byForm}`);
  await expect(page.getByTestId('job-state')).toHaveText('Failed');
  await expect(page.getByTestId('job-checkpoints')).toHaveCount(0);

  // Deleted now, asked first.
  await page.goto(`/jobs/${dropped}`);
  await expectState(page, 'Failed', 60_000);
  await expect(page.getByTestId('job-checkpoints')).toContainText('2 B kept until');
  page.once('dialog', (d) => void d.accept());
  await page.getByTestId('delete-checkpoints').click();
  await expect(page.getByTestId('job-checkpoints')).toHaveCount(0);
  const again = await request.post(`/api/trainyard/v1/jobs/${dropped}/retry?resume=true`, { data: {} });
  expect(again.status()).toBe(400);
  expect(await again.text()).toContain('keeps no checkpoints');
  // The job itself, deleted for good, asked first: the list no longer has it.
  page.once('dialog', (d) => void d.accept());
  await page.getByTestId('delete-job').click();
  await expect(page).toHaveURL(/\/jobs$/);
  await expect(page.getByTestId('jobs')).toBeVisible();
  await expect(page.locator(`a[href="/jobs/${dropped}"]`)).toHaveCount(0);
  expect((await request.get(`/api/trainyard/v1/jobs/${dropped}`)).status()).toBe(404);
});

test('ended jobs are ticked on the list and deleted together', async ({ page, request }) => {
  const quick = (name: string) => submitByApi(request, { name, command: 'true', resources: { memory: '64Mi' } });
  const ticked = [await quick('ticked one'), await quick('ticked two')];
  const left = await quick('left alone');
  const running = await submitByApi(request, { name: 'still running', command: 'sleep 60', resources: { memory: '64Mi' } });
  for (const id of [...ticked, left]) {
    await expect
      .poll(async () => (await (await request.get(`/api/trainyard/v1/jobs/${id}`)).json()).job.state, { timeout: 60_000 })
      .toBe('SUCCEEDED');
  }
  await page.goto('/jobs');
  const row = (id: number) => page.locator(`tr[data-job="${id}"]`);
  // A job that has not ended cannot be ticked.
  await expect(row(running)).toBeVisible();
  await expect(row(running).getByTestId('select-job')).toHaveCount(0);
  const button = page.getByTestId('delete-selected');
  // Ticked once the page is live (a tick before it is undone by hydration).
  await expect(async () => {
    for (const id of ticked) await row(id).getByTestId('select-job').check();
    await expect(button).toHaveText('Delete 2 jobs', { timeout: 1_000 });
  }).toPass({ timeout: 20_000 });
  // The list refreshes while a job runs; the ticks stay.
  await page.waitForResponse((r) => r.url().includes('/api/list_job_page'));
  await expect(row(running)).toBeVisible();
  await expect(row(ticked[0]).getByTestId('select-job')).toBeChecked();
  await expect(button).toHaveText('Delete 2 jobs');
  let asked = '';
  page.once('dialog', (d) => {
    asked = d.message();
    void d.accept();
  });
  await button.click();
  await expect(page.getByTestId('jobs-deleted')).toContainText('2 jobs were deleted for good.');
  expect(asked).toContain('Delete 2 jobs for good?');
  for (const id of ticked) {
    await expect(row(id)).toHaveCount(0);
    expect((await request.get(`/api/trainyard/v1/jobs/${id}`)).status()).toBe(404);
  }
  await expect(row(left).getByTestId('select-job')).not.toBeChecked();
  await expect(button).toHaveText('Delete the ticked jobs');
  await cancelByApi(request, running);
});

test('a project archive uploads with progress and the job runs it', async ({ page }) => {
  const dir = mkdtempSync(join(tmpdir(), 'trainyard-project-'));
  writeFileSync(join(dir, 'run.sh'), 'echo "project says $(cat message.txt)"\n');
  writeFileSync(join(dir, 'message.txt'), 'hello from the archive');
  // Some weight that does not compress, so the upload has progress to show.
  writeFileSync(join(dir, 'weights.bin'), randomBytes(4 << 20));
  const archive = join(dir, 'project.tar.gz');
  execFileSync('tar', ['czf', archive, '-C', dir, 'run.sh', 'message.txt', 'weights.bin']);

  await page.goto('/submit');
  const form = page.getByTestId('submit-job');
  await form.locator('input[name="form[name]"]').fill('from an archive');
  await form.locator('textarea[name="form[command]"]').fill('sh run.sh');
  // A slow link, so the progress can be seen.
  const cdp = await page.context().newCDPSession(page);
  await cdp.send('Network.enable');
  await cdp.send('Network.emulateNetworkConditions', {
    offline: false,
    latency: 0,
    downloadThroughput: -1,
    uploadThroughput: 1 << 20,
  });
  await expect(async () => {
    await page.getByTestId('project-file').setInputFiles(archive);
    await expect(page.getByTestId('upload-progress')).toBeVisible({ timeout: 1_000 });
  }).toPass({ timeout: 20_000 });
  await expect(page.getByTestId('upload-progress')).toContainText('uploading');
  await expect(page.getByTestId('upload-done')).toContainText('3 files', { timeout: 30_000 });
  await expect(page.getByTestId('upload-done')).toContainText('4.0 MiB unpacked');
  await cdp.send('Network.emulateNetworkConditions', {
    offline: false,
    latency: 0,
    downloadThroughput: -1,
    uploadThroughput: -1,
  });
  await form.getByRole('button', { name: 'Submit' }).click();
  await expect(page).toHaveURL(/\/jobs\/\d+$/);
  await expectState(page, 'Succeeded');
  await expect(page.getByTestId('log')).toContainText('project says hello from the archive');
  const first = page.url();

  // Edited and submitted again: the form comes filled with the job's
  // command, project and resources; a change makes a new job.
  await page.getByTestId('edit-resubmit').click();
  await expect(page).toHaveURL(/\/submit\?from=\d+$/);
  await expect(page.getByTestId('prefilled')).toContainText('Filled from job #');
  await expect(form.locator('input[name="form[name]"]')).toHaveValue('from an archive');
  await expect(form.locator('textarea[name="form[command]"]')).toHaveValue('sh run.sh');
  await expect(page.getByTestId('upload-done')).toContainText('the project the job ran with');
  await form.locator('input[name="form[name]"]').fill('from an archive, again');
  await form.locator('textarea[name="form[command]"]').fill('sh run.sh; echo "lr was {lr}"');
  await form.locator('textarea[name="form[hyperparameters]"]').fill('lr=0.5');
  await form.getByRole('button', { name: 'Submit' }).click();
  await expect(page).toHaveURL(/\/jobs\/\d+$/);
  expect(page.url()).not.toBe(first);
  await expectState(page, 'Succeeded');
  await expect(page.getByTestId('log')).toContainText('project says hello from the archive');
  await expect(page.getByTestId('log')).toContainText('lr was 0.5');
});

test('a template written in the browser joins the catalog and runs', async ({ page }) => {
  await page.goto('/templates');
  await page.getByTestId('new-template').click();
  await expect(page).toHaveURL(/\/templates\/new$/);
  const form = page.getByTestId('template-form');
  await form.locator('input[name="slug"]').fill('shout');
  // A wrong type first: the error names the field and says what to give,
  // in words (not serde's "expected u32").
  await form
    .locator('textarea[name="text"]')
    .fill('title: Shout\ndescription: prints a word\ncommand: echo hi\nresources: {memory: 64Mi, gpus: two}\n');
  await expect(async () => {
    await form.getByRole('button', { name: 'Save' }).click();
    await expect(page.getByRole('alert')).toContainText('resources.gpus: got the text "two"; give a whole number, 0 or more', { timeout: 2_000 });
  }).toPass({ timeout: 20_000 });
  await expect(page.getByRole('alert')).not.toContainText(/u32|went wrong/);
  // A wrong default: the error names the field.
  await form
    .locator('textarea[name="text"]')
    .fill('title: Shout\ndescription: prints a word\ncommand: echo {word}\nparameters:\n  word: {type: int, default: loud}\nresources: {memory: 64Mi}\n');
  await expect(async () => {
    await form.getByRole('button', { name: 'Save' }).click();
    await expect(page.getByRole('alert')).toContainText('parameters.word.default', { timeout: 2_000 });
  }).toPass({ timeout: 20_000 });
  await form
    .locator('textarea[name="text"]')
    .fill('title: Shout\ndescription: prints a word\ncommand: echo {word}\nparameters:\n  word: {type: string, default: loud}\nresources: {memory: 64Mi}\n');
  await form.getByRole('button', { name: 'Save' }).click();
  await expect(page).toHaveURL(/\/templates$/);
  const card = page.locator('[data-template="shout"]');
  await expect(card).toContainText('prints a word');
  // A new template under a name already taken does not replace it.
  await page.goto('/templates/new');
  await form.locator('input[name="slug"]').fill('shout');
  await form.locator('textarea[name="text"]').fill('title: Other\ndescription: not this one\ncommand: echo other\n');
  await expect(async () => {
    await form.getByRole('button', { name: 'Save' }).click();
    await expect(page.getByRole('alert')).toContainText('a template named `shout` exists already', { timeout: 2_000 });
  }).toPass({ timeout: 20_000 });
  await page.goto('/templates');
  await expect(card).toContainText('prints a word');
  await card.getByRole('link', { name: 'Use this template' }).click();
  const submit = page.getByTestId('submit-job');
  await submit.locator('input[name="form[name]"]').fill('shouting');
  await submit.locator('input[name="form[hp][word]"]').fill('HELLO');
  await submit.getByRole('button', { name: 'Submit' }).click();
  await expect(page).toHaveURL(/\/jobs\/\d+$/);
  await expectState(page, 'Succeeded');
  await expect(page.getByTestId('log')).toContainText('HELLO');
});

test('a job waiting for the only GPU shows its place and reason', async ({ page, request }) => {
  const spec = (name: string) => ({
    name,
    command: 'sleep 120',
    resources: { gpus: 1, memory: '64Mi' },
  });
  const first = await submitByApi(request, spec('holds the GPU'));
  const second = await submitByApi(request, spec('waits for it'));
  try {
    await page.goto('/jobs');
    const row = page.locator(`tr[data-job="${second}"]`);
    await expect(row).toContainText('#1 · no node has 1 free GPU; largest free block is 0');
    await expect(row).toContainText('Queued');
    await expect(page.locator(`tr[data-job="${first}"]`)).toContainText('Running');
    // Narrowed to a state: only the waiting one, and back to any.
    await page.getByTestId('job-states').getByRole('link', { name: 'Queued' }).click();
    await expect(page).toHaveURL(/\/jobs\?state=QUEUED$/);
    await expect(page.locator(`tr[data-job="${second}"]`)).toBeVisible();
    await expect(page.locator(`tr[data-job="${first}"]`)).toHaveCount(0);
    await expect(page.locator('tr[data-state="RUNNING"]')).toHaveCount(0);
    await page.getByTestId('job-states').getByRole('link', { name: 'Any state' }).click();
    await expect(page.locator(`tr[data-job="${first}"]`)).toBeVisible();

    // The admin page draws who holds the machine's GPU.
    await page.goto('/admin');
    await expect(page.getByTestId('nodes-summary')).toHaveText(
      "1 node of the local executor: 1 GPU, 1 held by Trainyard's jobs, 0 free",
    );
    const node = page.getByTestId('nodes').locator('tbody tr');
    await expect(node).toHaveCount(1);
    await expect(node.getByTestId('node-state')).toHaveText('takes jobs');
    await expect(node.getByTestId('node-used')).toHaveText('1');
    await expect(node.getByTestId('node-free')).toHaveText('0');
    await expect(node.getByRole('img')).toHaveAttribute(
      'aria-label',
      "1 of 1 GPU held by Trainyard's jobs, 0 by others, 0 free",
    );
    await expect(node.getByRole('link', { name: `#${first}` })).toHaveAttribute('href', `/jobs/${first}`);
  } finally {
    await cancelByApi(request, second);
    await cancelByApi(request, first);
  }
});

test('an admin drains the node from the admin page and resumes it', async ({ page, request }) => {
  await page.goto('/admin');
  const node = page.getByTestId('nodes').locator('tbody tr');
  await expect(node).toHaveCount(1);
  const name = await node.getAttribute('data-node');
  let waiting = 0;
  try {
    await node.getByTestId('drain-reason').fill('driver update');
    await node.getByTestId('drain-node').click();
    await expect(node.getByTestId('node-state')).toHaveText('drained by local: driver update');
    await expect(node.getByTestId('resume-node')).toBeVisible();

    // A job that needs the node waits, and says why.
    waiting = await submitByApi(request, {
      name: 'waits for the drain',
      command: 'sleep 120',
      resources: { gpus: 1, memory: '64Mi' },
    });
    await page.goto('/jobs');
    await expect(page.locator(`tr[data-job="${waiting}"]`)).toContainText(
      `${name}, the only node it fits on, takes no new jobs now: it is drained (driver update)`,
    );

    await page.goto('/admin');
    await node.getByTestId('resume-node').click();
    await expect(node.getByTestId('node-state')).toHaveText('takes jobs');
    await page.goto(`/jobs/${waiting}`);
    await expectState(page, 'Running');
  } finally {
    await request.delete(`/api/trainyard/v1/nodes/${name}/drain`);
    if (waiting) await cancelByApi(request, waiting);
  }
});

test('the form says what each field takes and offers only what the template uses', async ({ page }) => {
  await page.goto('/submit?template=cpu-demo');
  const form = page.getByTestId('submit-job');
  const field = (name: string) => form.locator('.field', { has: page.locator(`[name="${name}"]`) });
  await expect(field('form[hp][epochs]').getByTestId('param-range')).toHaveText('a whole number from 1 to 100000');
  await expect(field('form[hp][lr]').getByTestId('param-range')).toHaveText('a number from 0.000001 to 10');
  // Required fields say so beside their name; optional ones do not.
  const after = (name: string) =>
    field(name).locator('label').first().evaluate((el) => getComputedStyle(el, '::after').content);
  expect(await after('form[name]')).toContain('required');
  expect(await after('form[experiment]')).not.toContain('required');
  // The experiments people have are suggested as they type.
  await expect(page.locator('#experiment-names option[value="Default"]')).toHaveCount(1);
  // The demo brings its own files and data: no upload, no datasets.
  await expect(page.getByTestId('project-file')).toHaveCount(0);
  await expect(form.locator('[name="form[datasets]"]')).toHaveCount(0);
  // A command of one's own, and a template that says it takes them, offer both.
  for (const url of ['/submit', '/submit?template=byo-script']) {
    await page.goto(url);
    await expect(page.getByTestId('project-file')).toHaveCount(1);
    await expect(page.locator('[name="form[datasets]"]')).toHaveCount(1);
  }
});

test('a wrong field is marked on the form', async ({ page }) => {
  await page.goto('/submit');
  const form = page.getByTestId('submit-job');
  await form.locator('input[name="form[name]"]').fill('too big');
  await form.locator('textarea[name="form[command]"]').fill('true');
  await form.locator('input[name="form[gpus]"]').fill('5');
  await expect(async () => {
    await form.getByRole('button', { name: 'Submit' }).click();
    await expect(page.locator('.field-error[data-field="resources.gpus"]')).toContainText(
      'this server has 1',
      { timeout: 2_000 },
    );
  }).toPass({ timeout: 20_000 });
  await expect(page).toHaveURL(/\/submit$/);
});

test.describe('without JavaScript', () => {
  test.use({ javaScriptEnabled: false });

  test('a job page shows its state, timeline and log', async ({ page, request }) => {
    const id = await submitByApi(request, {
      name: 'printer',
      command: 'echo "hello from job $TRAINYARD_JOB_ID"',
      resources: { memory: '64Mi' },
    });
    await expect(async () => {
      await page.goto(`/jobs/${id}`);
      await expect(page.getByTestId('job-state')).toHaveText('Succeeded', { timeout: 1_000 });
    }).toPass({ timeout: 20_000 });
    await expect(page.getByTestId('log')).toContainText(`hello from job ${id}`);
    await expect(page.getByTestId('events')).toContainText('started');
    await page.goto('/jobs');
    await expect(page.locator(`tr[data-job="${id}"]`)).toContainText('Succeeded');
  });
});
