// Sign-in with a real OpenID Provider (oidc/provider.mjs, oidc-provider on
// loopback), driven in Chromium: the redirect, the provider's login form and
// consent, the callback, teams from groups, sign-out at the provider; the
// attacks that must fail; and API tokens made in the browser.
import { expect, request as apiRequest, test } from '@playwright/test';

import { app, provider, signIn, throughProvider } from './sso';

test('a person signs in at the provider with their teams, and signs out there', async ({ page, context }) => {
  await page.goto('/jobs?all=1');
  await throughProvider(page, 'alice');
  // Back where they were going, signed in.
  expect(page.url()).toBe(`${app()}/jobs?all=1`);
  await expect(page.getByTestId('user-name')).toContainText('Alice Anders');
  await expect(page.getByTestId('single-user-banner')).toHaveCount(0);
  await expect(page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Admin' })).toHaveCount(0);
  const me = await (await page.request.get('/api/trainyard/v1/me')).json();
  expect(me.user.username).toBe('alice');
  expect(me.user.email).toBe('alice@uni.example');
  expect(me.user.is_admin).toBe(false);
  expect(me.user.teams.map((t: { name: string }) => t.name)).toEqual(['vision']);
  expect(me.single_user).toBe(false);

  const [cookie] = (await context.cookies(app())).filter((c) => c.name === 'trainyard_session');
  expect(cookie.httpOnly).toBe(true);
  expect(cookie.sameSite).toBe('Lax');

  // Signing out ends the session here and at the provider.
  await page.getByTestId('sign-out').click();
  await expect(page).toHaveURL(new RegExp(`^${provider()}/session/end`));
  await page.getByRole('button', { name: 'Yes, sign me out' }).click();
  await expect(page).toHaveURL(`${app()}/auth/signed-out`);
  await expect(page.getByRole('heading', { name: 'Signed out' })).toBeVisible();
  expect((await page.request.get('/api/trainyard/v1/me')).status()).toBe(401);
  await page.goto('/jobs');
  // The provider asks again: its session ended too.
  await expect(page.locator('input[name="login"]')).toBeVisible();
});

test('the admin group makes admins, and groups become teams', async ({ browser }) => {
  const admin = await browser.newPage();
  await signIn(admin, 'root', '/');
  await expect(admin.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Admin' })).toBeVisible();
  expect((await (await admin.request.get('/api/trainyard/v1/me')).json()).user.is_admin).toBe(true);
  await admin.close();

  const carol = await browser.newPage();
  await signIn(carol, 'carol', '/');
  const me = await (await carol.request.get('/api/trainyard/v1/me')).json();
  // Keycloak-style group paths lose their slash.
  expect(me.user.teams.map((t: { name: string }) => t.name)).toEqual(['nlp']);
  expect(me.user.is_admin).toBe(false);
  await carol.close();
});

test('groups changed at the provider reach a signed-in person; a removal there ends the session', async ({ page, request }) => {
  const account = async (query: string) =>
    expect((await request.get(`${provider()}/__test/account?${query}`)).ok()).toBe(true);
  await account('name=dora&groups=gpu-admins,vision');
  await signIn(page, 'dora', '/');
  const me = async () => (await page.request.get('/api/trainyard/v1/me')).json();
  expect((await me()).user.is_admin).toBe(true);
  const nav = page.getByRole('navigation', { name: 'Main' });
  await expect(nav.getByRole('link', { name: 'Admin' })).toBeVisible();

  // Out of the admin group and into nlp at the provider: no sign-in needed.
  await account('name=dora&groups=vision,nlp');
  await expect.poll(async () => (await me()).user.is_admin, { timeout: 30_000 }).toBe(false);
  expect((await me()).user.teams.map((t: { name: string }) => t.name)).toEqual(['nlp', 'vision']);
  await page.reload();
  await expect(nav.getByRole('link', { name: 'Jobs' })).toBeVisible();
  await expect(nav.getByRole('link', { name: 'Admin' })).toHaveCount(0);

  // Removed at the provider: its refresh is refused, and the session ends.
  await account('name=dora&gone=1');
  await expect
    .poll(async () => (await page.request.get('/api/trainyard/v1/me')).status(), { timeout: 30_000 })
    .toBe(401);
});

test('a callback is good once: replayed, tampered or missing state fails', async ({ page, browser }) => {
  let callback = '';
  page.on('request', (r) => {
    if (r.url().startsWith(`${app()}/auth/callback`)) callback = r.url();
  });
  await signIn(page, 'bob');
  expect(callback).toContain('code=');

  const other = await browser.newPage();
  const replayed = await other.goto(callback);
  expect(replayed?.status()).toBe(400);
  await expect(other.getByRole('heading', { name: 'Sign-in failed' })).toBeVisible();
  await expect(other.getByText('start again')).toBeVisible();

  const url = new URL(callback);
  url.searchParams.set('state', 'tampered');
  expect((await other.goto(url.toString()))?.status()).toBe(400);
  url.searchParams.delete('state');
  expect((await other.goto(url.toString()))?.status()).toBe(400);
  expect((await other.request.get('/api/trainyard/v1/me')).status()).toBe(401);
  await other.close();
});

test('a sign-in finished by someone else cannot be slipped to another browser', async ({ browser }) => {
  // The attacker signs in at the provider as themselves and keeps the
  // callback link instead of following it (the consent is sent without
  // following redirects, which the browser would).
  const attacker = await browser.newPage();
  await attacker.goto('/jobs');
  await attacker.locator('input[name="login"]').fill('carol');
  await attacker.locator('input[name="password"]').fill('any password will do');
  await attacker.getByRole('button', { name: 'Sign-in' }).click();
  const consent = attacker.locator('form', { has: attacker.getByRole('button', { name: 'Continue' }) });
  await expect(consent).toBeVisible();
  let url = new URL((await consent.getAttribute('action')) ?? '', attacker.url()).toString();
  const fields: Record<string, string> = Object.fromEntries(
    await consent.locator('input[type="hidden"]').evaluateAll((inputs) =>
      inputs.map((i) => [(i as HTMLInputElement).name, (i as HTMLInputElement).value]),
    ),
  );
  let hop = await attacker.request.post(url, { form: fields, maxRedirects: 0 });
  while (hop.status() >= 300 && hop.status() < 400 && !url.startsWith(`${app()}/auth/callback`)) {
    url = new URL(hop.headers()['location'], url).toString();
    if (!url.startsWith(`${app()}/auth/callback`)) hop = await attacker.request.get(url, { maxRedirects: 0 });
  }
  const link = url;
  expect(link).toContain('code=');

  // The victim's browser opens it: refused, and nobody is signed in.
  const victim = await browser.newPage();
  const response = await victim.goto(link);
  expect(response?.status()).toBe(400);
  await expect(victim.getByText('started in another browser')).toBeVisible();
  expect((await victim.request.get('/api/trainyard/v1/me')).status()).toBe(401);
  await attacker.close();
  await victim.close();
});

for (const how of ['wrong-nonce', 'expired', 'other-audience', 'other-issuer', 'bad-signature']) {
  test(`an ID token with ${how} is refused`, async ({ page }) => {
    const set = await page.request.get(`${provider()}/__test/misbehave?how=${how}`);
    expect((await set.json()).misbehave).toBe(how);
    await page.goto('/jobs');
    await throughProvider(page, 'alice');
    await expect(page.getByRole('heading', { name: 'Sign-in failed' })).toBeVisible();
    await expect(page.getByText('ID token was not accepted')).toBeVisible();
    expect((await page.request.get('/api/trainyard/v1/me')).status()).toBe(401);
  });
}

test('a forged session cookie is nobody', async ({ page, context }) => {
  const { hostname } = new URL(app());
  await context.addCookies([{ name: 'trainyard_session', value: 'forged-secret', domain: hostname, path: '/' }]);
  await page.goto('/jobs');
  await expect(page).toHaveURL(new RegExp(`^${provider()}/interaction/`));
});

test('a page elsewhere cannot change things with the session', async ({ page }) => {
  await signIn(page, 'alice');
  // A form on another origin (the provider's; same site, other port) posts
  // to a server function and to sign-out, with the session cookie.
  for (const [action, fields] of [
    ['/api/create_token', '&name=evil&expires_in_days='],
    ['/auth/logout', ''],
  ]) {
    const refused = page.waitForResponse((r) => r.url() === `${app()}${action}`);
    await page.goto(`${provider()}/__test/csrf?action=${encodeURIComponent(app() + action)}${fields}`);
    const response = await refused;
    expect(response.status()).toBe(403);
    expect(await response.text()).toContain('cross-site request refused');
  }
  const tokens = await (await page.request.get('/api/trainyard/v1/tokens')).json();
  expect(tokens.tokens.map((t: { name: string }) => t.name)).not.toContain('evil');
  // Still signed in: the cross-site sign-out did nothing.
  expect((await page.request.get('/api/trainyard/v1/me')).status()).toBe(200);
});

test('API tokens are made in the browser, shown once, used and revoked', async ({ page }) => {
  await signIn(page, 'alice', '/settings/tokens');
  await expect(page.getByRole('heading', { name: 'API tokens' })).toBeVisible();
  await page.getByLabel('Name').fill('laptop');
  await page.getByRole('button', { name: 'Make a token' }).click();
  const secret = await page.getByTestId('token-secret').inputValue();
  expect(secret).toMatch(/^ty_[A-Za-z0-9_-]{40,}$/);
  // One click copies it.
  await page.context().grantPermissions(['clipboard-read', 'clipboard-write']);
  await page.getByTestId('copy-token').click();
  await expect(page.getByTestId('copy-said')).toHaveText('Copied.');
  expect(await page.evaluate(() => navigator.clipboard.readText())).toBe(secret);

  // The command line and the mlflow client send it as a Bearer token.
  const cli = await apiRequest.newContext({ baseURL: app(), extraHTTPHeaders: { Authorization: `Bearer ${secret}` } });
  const me = await (await cli.get('/api/trainyard/v1/me')).json();
  expect(me.user.username).toBe('alice');

  await page.reload();
  await expect(page.getByTestId('token-secret')).toHaveCount(0);
  const row = page.getByTestId('tokens').locator('tr', { hasText: 'laptop' });
  await expect(row).toBeVisible();
  await expect(row).not.toContainText(secret);
  await row.getByTestId('revoke').click();
  await expect(page.getByTestId('no-tokens')).toBeVisible();
  expect((await cli.get('/api/trainyard/v1/me')).status()).toBe(401);
  await cli.dispose();
});
