// A job submitted from the browser becomes a Kubernetes Job on the test
// cluster (kwok's pods "run" for 3 s, print three lines and succeed): its
// page shows where it runs, its state as it changes and the pod's log; the
// admin page shows the cluster's GPU nodes and who holds their GPUs.
import { expect, test } from '@playwright/test';

test('a job from the browser runs as a Kubernetes Job and its pod log shows', async ({ page }) => {
  await page.goto('/submit');
  const form = page.getByTestId('submit-job');
  await form.locator('input[name="form[name]"]').fill('on the cluster');
  await form.locator('textarea[name="form[command]"]').fill('python train.py');
  await form.locator('input[name="form[gpus]"]').fill('2');
  await expect(async () => {
    await form.getByRole('button', { name: 'Submit' }).click();
    await expect(page).toHaveURL(/\/jobs\/\d+$/, { timeout: 2_000 });
  }).toPass({ timeout: 20_000 });
  const id = Number(page.url().split('/').pop());

  await expect(page.getByTestId('job-state')).toHaveText('Succeeded');
  await expect(page.getByTestId('job-node')).toHaveText(/^gpu-node-000[1-4]$/);
  await expect(page.getByTestId('job-pod')).toHaveText(new RegExp(`^trainyard-${id}-0-[0-9a-f]{8}-[a-z0-9]{5}$`));
  const events = page.getByTestId('events');
  await expect(events).toContainText(
    new RegExp(`running \\(Kubernetes Job [a-z0-9-]+/trainyard-${id}-0-[0-9a-f]{8} on node gpu-node-000[1-4]\\)`),
  );
  await expect(events).toContainText('exited with code 0');
  // The pod's log, through pods/log, kept after the pod.
  await expect(page.getByTestId('log')).toContainText('kwok: epoch 3');
  await page.screenshot({ path: test.info().outputPath('k8s-job.png'), fullPage: true });

  // The admin page lists the cluster's GPU nodes of the selector.
  await page.goto('/admin');
  await expect(page.getByTestId('nodes-summary')).toContainText('4 nodes of the kubernetes executor: 32 GPUs');
  const rows = page.getByTestId('nodes').locator('tbody tr');
  await expect(rows).toHaveCount(4);
  await expect(rows.first().getByTestId('node-state')).toHaveText('takes jobs');
});
