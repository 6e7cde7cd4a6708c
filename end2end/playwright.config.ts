// Playwright runs the release server (built by `make build`) on a loopback
// port with a fresh data folder, and drives Debian's Chromium against it.
import { defineConfig } from '@playwright/test';
import { mkdtempSync } from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

const port = Number(process.env.E2E_PORT ?? 3917);
const root = resolve(__dirname, '..');
const targetDir = process.env.CARGO_TARGET_DIR ?? join(root, 'target');
const bin = process.env.E2E_TRAINYARD_BIN ?? join(targetDir, 'release', 'trainyard');
const dataDir = mkdtempSync(join(tmpdir(), 'trainyard-e2e-'));

export default defineConfig({
  testDir: './tests',
  outputDir: './test-results',
  timeout: 30_000,
  expect: { timeout: 10_000 },
  fullyParallel: false,
  workers: 1,
  retries: 0,
  reporter: [['list']],
  use: {
    baseURL: `http://127.0.0.1:${port}`,
    browserName: 'chromium',
    launchOptions: {
      executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
      args: [
        '--no-sandbox',
        '--disable-gpu',
        '--disable-quic',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
        '--no-first-run',
      ],
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
      TRAINYARD_DATA_DIR: dataDir,
      TRAINYARD_SITE_DIR: join(root, 'target', 'site'),
      TRAINYARD_TEMPLATES_DIR: join(root, 'templates'),
      // Python environments for templates are cached across runs, like a server's.
      TRAINYARD_VENV_DIR: join(homedir(), '.cache', 'trainyard', 'job-venvs'),
      // One GPU to queue for, on a machine without any.
      TRAINYARD_SIMULATED_GPUS: '1',
      TRAINYARD_JOB_STOP_GRACE_SECS: '2',
      TRAINYARD_LOG: 'info',
    },
  },
});
