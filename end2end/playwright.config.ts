// Playwright runs the release server (built by `make build`) on loopback
// ports with fresh data folders, and drives Debian's Chromium against it:
// once in the single-user mode (project `local`), and once with sign-in
// through the test OpenID Provider of oidc/provider.mjs (project `sso`).
import { defineConfig } from '@playwright/test';
import { mkdtempSync } from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

const port = Number(process.env.E2E_PORT ?? 3917);
const ssoPort = port + 1;
const oidcPort = port + 13;
const root = resolve(__dirname, '..');
const targetDir = process.env.CARGO_TARGET_DIR ?? join(root, 'target');
const bin = process.env.E2E_TRAINYARD_BIN ?? join(targetDir, 'release', 'trainyard');
const dataDir = mkdtempSync(join(tmpdir(), 'trainyard-e2e-'));
const ssoDataDir = mkdtempSync(join(tmpdir(), 'trainyard-e2e-sso-'));

// As root, as on CI, each job runs as a uid of its own: the servers get
// ranges of their own (a job's end stops every process of its uid), and
// the environment cache lies where those uids can reach it (not in a
// root's home, which they cannot pass through).
const asRoot = process.getuid?.() === 0;
const jobUids = (first: number) => (asRoot ? `${first}-${first + 49}` : 'none');

// What both servers share.
const serverEnv = {
  TRAINYARD_SITE_DIR: join(root, 'target', 'site'),
  TRAINYARD_TEMPLATES_DIR: join(root, 'templates'),
  // Python environments for templates are cached across runs, like a server's.
  TRAINYARD_VENV_DIR: asRoot
    ? '/var/cache/trainyard-test/job-venvs'
    : join(homedir(), '.cache', 'trainyard', 'job-venvs'),
  // One GPU to queue for, on a machine without any.
  TRAINYARD_SIMULATED_GPUS: '1',
  TRAINYARD_JOB_STOP_GRACE_SECS: '2',
  // GPU samples every 2 s, and a held GPU counts as idle after a minute
  // below 5 %, so that the telemetry pages fill and flag within a test.
  TRAINYARD_GPU_SAMPLE_SECS: '2',
  TRAINYARD_GPU_IDLE_MINUTES: '1',
  TRAINYARD_LOG: 'info',
};

export default defineConfig({
  testDir: './tests',
  outputDir: './test-results',
  timeout: 30_000,
  expect: { timeout: 10_000 },
  fullyParallel: false,
  workers: 1,
  retries: 0,
  reporter: [['list']],
  projects: [
    { name: 'local', testIgnore: /(auth|fair-share)\.spec\.ts/, use: { baseURL: `http://127.0.0.1:${port}` } },
    {
      name: 'sso',
      testMatch: /(auth|fair-share)\.spec\.ts/,
      use: { baseURL: `http://127.0.0.1:${ssoPort}` },
      metadata: { provider: `http://127.0.0.1:${oidcPort}` },
    },
  ],
  use: {
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
  webServer: [
    {
      command: `"${bin}" serve`,
      url: `http://127.0.0.1:${port}/readyz`,
      reuseExistingServer: false,
      timeout: 60_000,
      stdout: 'pipe',
      stderr: 'pipe',
      env: {
        ...serverEnv,
        TRAINYARD_LISTEN: `127.0.0.1:${port}`,
        TRAINYARD_DATA_DIR: dataDir,
        TRAINYARD_JOB_UIDS: jobUids(61_000),
        // The webhooks test sends to a closed port on loopback, not to the
        // internet.
        TRAINYARD_WEBHOOK_ALLOW_PRIVATE_HOSTS: 'true',
        TRAINYARD_WEBHOOK_SCHEMES: 'http,https',
      },
    },
    {
      command: 'node oidc/provider.mjs',
      url: `http://127.0.0.1:${oidcPort}/.well-known/openid-configuration`,
      reuseExistingServer: false,
      timeout: 30_000,
      stdout: 'pipe',
      stderr: 'pipe',
      env: { OIDC_PORT: String(oidcPort), OIDC_APP_URL: `http://127.0.0.1:${ssoPort}` },
    },
    {
      command: `"${bin}" serve`,
      url: `http://127.0.0.1:${ssoPort}/readyz`,
      reuseExistingServer: false,
      timeout: 60_000,
      stdout: 'pipe',
      stderr: 'pipe',
      env: {
        ...serverEnv,
        TRAINYARD_LISTEN: `127.0.0.1:${ssoPort}`,
        TRAINYARD_DATA_DIR: ssoDataDir,
        TRAINYARD_JOB_UIDS: jobUids(61_050),
        TRAINYARD_OIDC_ISSUER_URL: `http://127.0.0.1:${oidcPort}`,
        TRAINYARD_OIDC_CLIENT_ID: 'trainyard',
        TRAINYARD_OIDC_CLIENT_SECRET: 'trainyard-test-secret',
        TRAINYARD_OIDC_ADMIN_GROUP: 'gpu-admins',
        // Sessions are checked with the provider every 2 s (default 15 min).
        TRAINYARD_OIDC_RECHECK_SECS: '2',
      },
    },
  ],
});
