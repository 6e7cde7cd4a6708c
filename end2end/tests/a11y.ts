// Accessibility checks with axe-core, run inside the page through the
// DevTools protocol (page.evaluate), so the pages' CSP need not change.
import { expect, type Page } from '@playwright/test';
import { readFileSync } from 'node:fs';

const axeSource = readFileSync(require.resolve('axe-core/axe.min.js'), 'utf8');

type Violation = { id: string; impact: string; help: string; nodes: { target: string[] }[] };

/** The page's axe violations, in words a person can act on. */
export async function axeViolations(page: Page): Promise<string[]> {
  await page.evaluate(axeSource);
  const violations: Violation[] = await page.evaluate(async () => {
    // @ts-expect-error: axe is the script just evaluated.
    const result = await window.axe.run(document, { resultTypes: ['violations'] });
    return result.violations;
  });
  return violations.map(
    (v) => `${v.impact} ${v.id}: ${v.help} (${v.nodes.map((n) => n.target.join(' ')).slice(0, 4).join(', ')})`,
  );
}

/** Every violation found in the light and the dark theme, named by page. */
export async function violationsInBothThemes(page: Page, what: string): Promise<string[]> {
  const found: string[] = [];
  for (const theme of ['light', 'dark']) {
    await page.evaluate((t) => document.documentElement.setAttribute('data-theme', t), theme);
    for (const v of await axeViolations(page)) found.push(`${what} (${theme}): ${v}`);
  }
  return found;
}

/** Fails the test with every violation found, in the light and the dark theme. */
export async function expectAccessible(page: Page, what: string) {
  expect(await violationsInBothThemes(page, what)).toEqual([]);
}
