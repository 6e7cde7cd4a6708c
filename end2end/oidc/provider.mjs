// The test suite's identity provider: oidc-provider (a certified OpenID
// Provider) on loopback, with the people the tests sign in as, their
// groups, and Trainyard registered as a confidential client.
//
//   OIDC_PORT      where it listens (default 3930)
//   OIDC_APP_URL   Trainyard's address, for the redirect URIs
//
// It gives refresh tokens, and a refresh re-reads the account's groups, so
// that Trainyard's checks while someone stays signed in can be seen.
//
// Test hooks, on paths no real provider has:
//   GET /__test/misbehave?how=MODE  the next token response carries an ID
//       token re-signed with the provider's own key but wrong in one way:
//       wrong-nonce, expired, other-audience, other-issuer; or bad-signature
//       (signed with another key under the same key id).
//   GET /__test/csrf?action=URL&field=VALUE...  a page of this (other)
//       origin that posts a form to URL as soon as it loads.
//   GET /__test/account?name=NAME&groups=a,b  makes NAME's groups these
//       (creating the account); with &gone=1, removes NAME (their refresh
//       tokens are then refused).
import Provider from 'oidc-provider';
import * as jose from 'jose';

const port = Number(process.env.OIDC_PORT ?? 3930);
const appUrl = process.env.OIDC_APP_URL ?? 'http://127.0.0.1:3918';
const issuer = `http://127.0.0.1:${port}`;

const ACCOUNTS = {
  alice: { name: 'Alice Anders', email: 'alice@uni.example', groups: ['vision'] },
  bob: { name: 'Bob Berg', email: 'bob@uni.example', groups: ['vision'] },
  carol: { name: 'Carol Chen', email: 'carol@uni.example', groups: ['/nlp'] },
  root: { name: 'Rita Root', email: 'root@uni.example', groups: ['gpu-admins'] },
};

const KID = 'trainyard-test';
const { privateKey } = await jose.generateKeyPair('RS256', { extractable: true });
const signingJwk = { ...(await jose.exportJWK(privateKey)), kid: KID, alg: 'RS256', use: 'sig' };
const { privateKey: strangerKey } = await jose.generateKeyPair('RS256');

const provider = new Provider(issuer, {
  clients: [
    {
      client_id: 'trainyard',
      client_secret: 'trainyard-test-secret',
      redirect_uris: [`${appUrl}/auth/callback`],
      post_logout_redirect_uris: [`${appUrl}/auth/signed-out`],
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      token_endpoint_auth_method: 'client_secret_basic',
    },
  ],
  jwks: { keys: [signingJwk] },
  cookies: { keys: ['trainyard-test-cookie-key'] },
  claims: {
    openid: ['sub'],
    profile: ['name', 'preferred_username', 'groups'],
    email: ['email', 'email_verified'],
  },
  // The claims of the scopes asked for go into the ID token itself.
  conformIdTokenClaims: false,
  pkce: { required: () => true },
  // As Keycloak does for a confidential client (others with offline_access).
  async issueRefreshToken(ctx, client) {
    return client.grantTypeAllowed('refresh_token');
  },
  features: { devInteractions: { enabled: true }, rpInitiatedLogout: { enabled: true } },
  async findAccount(ctx, id) {
    const person = ACCOUNTS[id];
    if (!person) return undefined;
    return {
      accountId: id,
      async claims() {
        return { sub: id, preferred_username: id, email_verified: true, ...person };
      },
    };
  },
});

let misbehave = null;

async function spoil(idToken, how) {
  const claims = jose.decodeJwt(idToken);
  const now = Math.floor(Date.now() / 1000);
  let key = privateKey;
  switch (how) {
    case 'wrong-nonce': claims.nonce = 'not-the-nonce-it-was-given'; break;
    case 'expired': claims.iat = now - 7200; claims.exp = now - 3600; break;
    case 'other-audience': claims.aud = 'some-other-client'; break;
    case 'other-issuer': claims.iss = 'http://127.0.0.1:1/another-provider'; break;
    case 'bad-signature': key = strangerKey; break;
    default: throw new Error(`unknown misbehaviour ${how}`);
  }
  return new jose.SignJWT(claims).setProtectedHeader({ alg: 'RS256', kid: KID }).sign(key);
}

const escape = (s) => String(s).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

provider.use(async (ctx, next) => {
  if (ctx.path === '/__test/misbehave') {
    misbehave = ctx.query.how || null;
    ctx.body = { misbehave };
    return;
  }
  if (ctx.path === '/__test/account') {
    const name = String(ctx.query.name || '');
    if (!/^[a-z]+$/.test(name)) {
      ctx.status = 400;
      ctx.body = { error: 'name: lowercase letters' };
      return;
    }
    if (ctx.query.gone) {
      delete ACCOUNTS[name];
    } else {
      const groups = String(ctx.query.groups || '').split(',').filter(Boolean);
      ACCOUNTS[name] = {
        name: name[0].toUpperCase() + name.slice(1),
        email: `${name}@uni.example`,
        ...ACCOUNTS[name],
        groups,
      };
    }
    ctx.body = { account: ACCOUNTS[name] ?? null };
    return;
  }
  if (ctx.path === '/__test/csrf') {
    const { action, ...fields } = ctx.query;
    const inputs = Object.entries(fields)
      .map(([k, v]) => `<input type="hidden" name="${escape(k)}" value="${escape(v)}">`)
      .join('');
    ctx.type = 'html';
    ctx.body = `<!DOCTYPE html><title>A page elsewhere</title>
      <form id="f" method="post" action="${escape(action)}">${inputs}</form>
      <script>document.getElementById('f').submit()</script>`;
    return;
  }
  await next();
  // Only a sign-in's token response: Trainyard's background refreshes
  // must not take the misbehaviour meant for it.
  if (
    ctx.path === '/token' && misbehave && ctx.body && ctx.body.id_token
    && ctx.oidc?.params?.grant_type === 'authorization_code'
  ) {
    const how = misbehave;
    misbehave = null;
    ctx.body = { ...ctx.body, id_token: await spoil(ctx.body.id_token, how) };
  }
});

provider.listen(port, '127.0.0.1', () => {
  console.log(`test OpenID Provider at ${issuer} for ${appUrl}`);
});
