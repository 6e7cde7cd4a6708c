// Signing in through the test OpenID Provider (oidc/provider.mjs), for the
// specs of the `sso` project.
import { expect, test, type Page } from '@playwright/test';

export const provider = () => test.info().project.metadata.provider as string;
export const app = () => test.info().project.use.baseURL as string;

/** From the provider's login form back to Trainyard (or its error page). */
export async function throughProvider(page: Page, who: string) {
  await expect(page).toHaveURL(new RegExp(`^${provider()}/interaction/`));
  await page.locator('input[name="login"]').fill(who);
  await page.locator('input[name="password"]').fill('any password will do');
  await page.getByRole('button', { name: 'Sign-in' }).click();
  const consent = page.getByRole('button', { name: 'Continue' });
  const back = page.getByTestId('user-menu').or(page.getByRole('heading', { name: 'Sign-in failed' }));
  await expect(consent.or(back)).toBeVisible();
  if (await consent.isVisible()) await consent.click();
  await expect(back).toBeVisible();
}

export async function signIn(page: Page, who: string, path = '/jobs') {
  await page.goto(path);
  await throughProvider(page, who);
  await expect(page.getByTestId('user-menu')).toBeVisible();
}

