// The Kubernetes executor in a real browser (k8s-browser/*.spec.ts): one
// release server whose jobs become Kubernetes Jobs on the test cluster.
// Run by end2end/k8s/executor.sh, which starts the cluster and passes its
// account (TEST_KUBECONFIG) and a namespace bound to the chart's RBAC.
import { defineConfig } from '@playwright/test';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

const need = (name: string) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is unset: run end2end/k8s/executor.sh`);
  return value;
};
const port = Number(process.env.E2E_K8S_PORT ?? 3957);
const root = resolve(__dirname, '..');
const targetDir = process.env.CARGO_TARGET_DIR ?? join(root, 'target');
const bin = process.env.E2E_TRAINYARD_BIN ?? join(targetDir, 'release', 'trainyard');

export default defineConfig({
  testDir: './k8s-browser',
  outputDir: './test-results/k8s',
  timeout: 90_000,
  expect: { timeout: 30_000 },
  workers: 1,
  retries: 0,
  reporter: [['list']],
  use: {
    baseURL: `http://127.0.0.1:${port}`,
    browserName: 'chromium',
    launchOptions: {
      executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
      args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--no-first-run'],
    },
    screenshot: 'only-on-failure',
    trace: 'retain-on-failure',
  },
  webServer: {
    command: `"${bin}" serve`,
    url: `http://127.0.0.1:${port}/readyz`,
    reuseExistingServer: false,
    timeout: 60_000,
    stdout: 'pipe',
    stderr: 'pipe',
    env: {
      TRAINYARD_LISTEN: `127.0.0.1:${port}`,
      TRAINYARD_DATA_DIR: mkdtempSync(join(tmpdir(), 'trainyard-e2e-k8s-')),
      TRAINYARD_SITE_DIR: join(root, 'target', 'site'),
      TRAINYARD_TEMPLATES_DIR: join(root, 'templates'),
      TRAINYARD_LOG: 'info',
      TRAINYARD_EXECUTOR: 'kubernetes',
      TRAINYARD_KUBE_CONFIG: need('TEST_KUBECONFIG'),
      TRAINYARD_KUBE_NAMESPACE: need('TEST_KUBE_BROWSER_NAMESPACE'),
      TRAINYARD_KUBE_NODE_SELECTOR: 'trainyard.dev/pool=default',
      TRAINYARD_KUBE_TOLERATIONS: '',
      TRAINYARD_KUBE_IMAGE: 'trainyard/fake-trainer:1',
      TRAINYARD_KUBE_TRAINYARD_IMAGE: 'trainyard/server:test',
      TRAINYARD_KUBE_TRACKING_URL: 'http://trainyard.trainyard.svc:3000',
      TRAINYARD_JOB_STOP_GRACE_SECS: '1',
    },
  },
});
