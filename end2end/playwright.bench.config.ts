// The explorer benchmark (bench/explorer.bench.ts): one release server on a
// fresh data folder, Debian's Chromium, one worker. Run by `make bench-explorer`.
import { defineConfig } from '@playwright/test';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

const port = Number(process.env.BENCH_PORT ?? 39620);
const root = resolve(__dirname, '..');
const targetDir = process.env.CARGO_TARGET_DIR ?? join(root, 'target');
const bin = process.env.E2E_TRAINYARD_BIN ?? join(targetDir, 'release', 'trainyard');

export default defineConfig({
  testDir: './bench',
  testMatch: /\.bench\.ts$/,
  outputDir: './test-results/bench',
  workers: 1,
  retries: 0,
  reporter: [['list']],
  use: {
    baseURL: `http://127.0.0.1:${port}`,
    browserName: 'chromium',
    viewport: { width: 1400, height: 900 },
    launchOptions: {
      executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
      args: ['--no-sandbox', '--disable-gpu', '--no-first-run'],
    },
  },
  webServer: {
    command: `"${bin}" serve`,
    url: `http://127.0.0.1:${port}/readyz`,
    reuseExistingServer: false,
    timeout: 60_000,
    stdout: 'ignore',
    stderr: 'pipe',
    env: {
      TRAINYARD_LISTEN: `127.0.0.1:${port}`,
      // scripts/bench-explorer.sh passes a folder it removes afterwards.
      TRAINYARD_DATA_DIR: process.env.BENCH_DATA_DIR ?? mkdtempSync(join(tmpdir(), 'trainyard-bench-')),
      TRAINYARD_SITE_DIR: join(root, 'target', 'site'),
      TRAINYARD_TEMPLATES_DIR: join(root, 'templates'),
      TRAINYARD_LOG: 'warn',
    },
  },
});
