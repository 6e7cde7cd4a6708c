// Fair share as people see it, with sign-in (project `sso`, one simulated
// GPU): an admin gives team nlp a guaranteed GPU in Admin → Teams; alice's
// job (team vision, no guarantee) runs on it as borrowed and says so; when
// carol (nlp) needs it, alice's job is preempted, and its page shows who
// needed the GPU back and why it waits now. Then an admin adds a team
// before its people sign in and files a running job under it.
import { expect, test, type Page } from '@playwright/test';
import { signIn } from './sso';

async function submitSleeper(page: Page, name: string, gpus = '1'): Promise<string> {
  await page.goto('/submit');
  const form = page.getByTestId('submit-job');
  await form.locator('input[name="form[name]"]').fill(name);
  await form.locator('textarea[name="form[command]"]').fill('sleep 600');
  await form.locator('input[name="form[gpus]"]').fill(gpus);
  await form.locator('input[name="form[cpus]"]').fill('0.1');
  await form.locator('input[name="form[memory]"]').fill('64Mi');
  await expect(async () => {
    await form.getByRole('button', { name: 'Submit' }).click();
    await expect(page).toHaveURL(/\/jobs\/\d+$/, { timeout: 2_000 });
  }).toPass({ timeout: 20_000 });
  return page.url();
}

async function cancel(page: Page, url: string) {
  await page.goto(url);
  page.once('dialog', (d) => void d.accept());
  await page.getByTestId('cancel').click();
  await expect(page.getByTestId('job-state')).toHaveText('Cancelled', { timeout: 30_000 });
}

test('a team within its quota takes its GPU back from a borrower, and both see why', async ({ browser }) => {
  test.setTimeout(120_000);
  const alice = await browser.newPage();
  const carol = await browser.newPage();
  const root = await browser.newPage();
  // Teams come from groups at first sign-in.
  await signIn(alice, 'alice');
  await signIn(carol, 'carol');
  await signIn(root, 'root', '/admin');

  // The admin guarantees nlp the GPU.
  const nlp = root.getByTestId('teams').locator('tr[data-team="nlp"]');
  await expect(nlp).toBeVisible();
  await expect(root.getByTestId('teams').locator('tr[data-team="vision"]')).toBeVisible();
  await nlp.getByTestId('quota').fill('1');
  await nlp.getByTestId('share').fill('2');
  await nlp.getByTestId('save-team').click();
  await root.reload();
  await expect(nlp.getByTestId('quota')).toHaveValue('1');
  await expect(nlp.getByTestId('share')).toHaveValue('2');
  // A weight out of range is refused before it is sent (the server checks
  // it too, naming the field).
  await nlp.getByTestId('share').fill('0');
  expect(await nlp.getByTestId('share').evaluate((e: HTMLInputElement) => e.validity.valid)).toBe(false);
  await root.reload();

  // Alice's job runs on the idle GPU, borrowed.
  const hers = await submitSleeper(alice, 'alice borrows');
  await expect(alice.getByTestId('job-state')).toHaveText('Running', { timeout: 30_000 });
  await expect(alice.getByTestId('borrowed')).toHaveText('borrowed GPUs, may be preempted');
  await expect(alice.getByTestId('job-team')).toHaveText('vision');
  await alice.goto('/jobs');
  await expect(alice.getByTestId('jobs').locator('tr', { hasText: 'alice borrows' }).getByTestId('borrowed')).toBeVisible();
  await root.reload();
  await expect(root.getByTestId('teams').locator('tr[data-team="vision"]').getByTestId('in-use')).toHaveText('1 (1 borrowed)');

  // Carol's team needs its guaranteed GPU: alice's job gives it back.
  const theirs = await submitSleeper(carol, 'carol needs it');
  await expect(carol.getByTestId('job-state')).toHaveText('Running', { timeout: 30_000 });
  await expect(carol.getByTestId('borrowed')).toHaveCount(0);
  await alice.goto(hers);
  await expect(alice.getByTestId('job-state')).toHaveText('Queued', { timeout: 30_000 });
  const events = alice.getByTestId('events');
  await expect(events).toContainText(/preempted: team nlp is within its quota of 1 GPU and needs 1 \(job \d+\)/);
  await expect(events).toContainText('without spending a retry');
  await expect(alice.getByTestId('job-queue')).toContainText('no node has 1 free GPU');
  await alice.screenshot({ path: test.info().outputPath('preempted-job.png'), fullPage: true });

  // Usage, drawn: alice sees her team's GPU time, not carol's team's.
  await alice.goto('/usage?period=day&by=team');
  await expect(alice.getByTestId('usage-chart')).toHaveAttribute('data-series', '1');
  await expect(alice.getByTestId('usage-chart').locator('svg rect').first()).toBeVisible();
  await expect(alice.getByTestId('usage-totals').locator('tr[data-name="vision"]')).toBeVisible();
  await expect(alice.getByTestId('usage-totals').locator('tr[data-name="nlp"]')).toHaveCount(0);
  const csv = await alice.request.get((await alice.getByTestId('usage-csv').getAttribute('href'))!);
  expect(csv.status()).toBe(200);
  expect(await csv.text()).toMatch(/^period_start,team,person,gpu_hours\n\d{4}-\d\d-\d\d,vision,alice,/);
  // A range of days, chosen in the form; the other views keep it.
  const today = new Date().toISOString().slice(0, 10);
  await alice.getByTestId('usage-from').fill(today);
  await alice.getByTestId('usage-to').fill(today);
  await alice.getByTestId('usage-show').click();
  await expect(alice).toHaveURL(new RegExp(`from=${today}&to=${today}`));
  await expect(alice.getByTestId('usage-totals').locator('tr[data-name="vision"]')).toBeVisible();
  await expect(alice.getByRole('link', { name: 'by week' })).toHaveAttribute('href', new RegExp(`from=${today}&to=${today}`));
  await expect(alice.getByTestId('usage-csv')).toHaveAttribute('href', /from=\d+&to=\d+/);
  // A day that is none is refused, naming the field.
  await alice.goto('/usage?period=day&from=2026-02-30');
  await expect(alice.getByRole('alert')).toContainText('`2026-02-30` is not a day');
  // The admin sees both teams, and per person on request.
  await root.goto('/usage?period=week&by=person');
  await expect(root.getByTestId('usage-totals').locator('tr[data-name="alice"]')).toBeVisible();
  await expect(root.getByTestId('usage-totals').locator('tr[data-name="carol"]')).toBeVisible();
  await root.screenshot({ path: test.info().outputPath('usage.png'), fullPage: true });

  await cancel(alice, hers);
  await cancel(carol, theirs);
  // Leave the quota as it was for other specs.
  await root.goto('/admin');
  await nlp.getByTestId('quota').fill('0');
  await nlp.getByTestId('share').fill('1');
  await nlp.getByTestId('save-team').click();
  await root.reload();
  await expect(nlp.getByTestId('quota')).toHaveValue('0');
  for (const p of [alice, carol, root]) await p.close();
});

test('an admin adds a team ahead of its people and files a job under it', async ({ browser }) => {
  test.setTimeout(60_000);
  const alice = await browser.newPage();
  const root = await browser.newPage();
  await signIn(alice, 'alice');
  await signIn(root, 'root', '/admin');

  // A team for a group nobody of which has signed in yet, with its guarantee.
  const form = root.getByTestId('new-team');
  await form.getByTestId('new-team-name').fill('robotics');
  await form.getByTestId('new-team-quota').fill('1');
  await form.getByTestId('add-team').click();
  const robotics = root.getByTestId('teams').locator('tr[data-team="robotics"]');
  await expect(robotics).toBeVisible();
  await expect(robotics.getByTestId('quota')).toHaveValue('1');
  // The same name again is refused, saying why.
  await form.getByTestId('new-team-name').fill('robotics');
  await form.getByTestId('add-team').click();
  await expect(root.getByRole('alert')).toContainText('team `robotics` already exists');
  // Guarantees past the GPUs there are: the page says so. (A team named
  // as its Keycloak path is the group sign-in reads.)
  await form.getByTestId('new-team-name').fill('/overpromised');
  await form.getByTestId('new-team-quota').fill('5');
  await form.getByTestId('add-team').click();
  const overpromised = root.getByTestId('teams').locator('tr[data-team="overpromised"]');
  await expect(overpromised.getByTestId('quota')).toHaveValue('5');
  await expect(root.getByTestId('overcommitted')).toContainText('more than the 1 the nodes have');
  await overpromised.getByTestId('quota').fill('0');
  await overpromised.getByTestId('save-team').click();
  await expect(overpromised.getByTestId('quota')).toHaveValue('0');

  // Alice, in one team, cannot move her job; the admin files it under robotics.
  const hers = await submitSleeper(alice, 'misfiled', '0');
  await expect(alice.getByTestId('job-state')).toHaveText('Running', { timeout: 30_000 });
  await expect(alice.getByTestId('job-team')).toHaveText('vision');
  await expect(alice.getByTestId('move-team')).toHaveCount(0);
  await root.goto(hers);
  await root.getByTestId('move-team-choice').selectOption('robotics');
  await root.getByTestId('move-team-submit').click();
  await expect(root.getByTestId('job-team')).toHaveText('robotics');
  await alice.reload();
  await expect(alice.getByTestId('job-team')).toHaveText('robotics');
  await expect(alice.getByTestId('events')).toContainText('team moved from vision to robotics by root');

  // The audit trail keeps what root did, newest first, and narrows to one
  // kind of action; Alice may not read it.
  await root.goto('/admin');
  await root.getByTestId('admin-audit').click();
  await expect(root).toHaveURL(/\/admin\/audit$/);
  const trail = root.getByTestId('audit');
  const moved = trail.locator('tr[data-action="job.move"]').first();
  await expect(moved).toContainText('root');
  await expect(moved).toContainText('from vision to robotics');
  await expect(trail.locator('tr[data-action="team.create"]', { hasText: 'team robotics' })).toBeVisible();
  await root.getByTestId('audit-action').selectOption('team.change');
  await root.getByTestId('audit-filter').getByRole('button', { name: 'Show' }).click();
  await expect(root).toHaveURL(/action=team\.change/);
  await expect(trail.locator('tbody tr').first()).toHaveAttribute('data-action', 'team.change');
  await expect(trail.locator('tr[data-action="job.move"]')).toHaveCount(0);
  await alice.goto('/admin/audit');
  await expect(alice.getByTestId('admins-only')).toBeVisible();

  await cancel(alice, hers);
  for (const p of [alice, root]) await p.close();
});
