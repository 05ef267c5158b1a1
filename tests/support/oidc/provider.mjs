// A real OpenID Provider (the `oidc-provider` package) for Loraplex's single sign-on tests.
//
// Usage: node provider.mjs <port> <redirect_uri> <client_id> <client_secret>
// Prints "ready <issuer>" on stdout once it listens on 127.0.0.1:<port>.
//
// Besides the provider's own endpoints it serves, for the tests only:
// - GET  /interaction/:uid          the sign-in form's page (a plain 200 naming the uid)
// - POST /interaction/:uid/login    form field `login`: sign in as that account and consent
// - PUT  /test/accounts/:id         JSON {email, email_verified, name, groups}: create or replace
// - DELETE /test/accounts/:id       the provider no longer knows the account
// - POST /test/tamper               JSON {claims?, expired?, foreign_key?}: the next token
//                                   response's ID token is re-signed with these claims
//                                   replaced, an expiry in the past, or another key
import { randomBytes } from 'node:crypto';

import {
  decodeJwt, decodeProtectedHeader, exportJWK, generateKeyPair, importJWK, SignJWT,
} from 'jose';
import Provider from 'oidc-provider';

const [port, redirectUri, clientId, clientSecret] = process.argv.slice(2);
const issuer = `http://127.0.0.1:${port}`;
const accounts = new Map();
let tamper = null;

async function signingKey(kid) {
  const { privateKey } = await generateKeyPair('RS256', { extractable: true });
  return { ...(await exportJWK(privateKey)), kid, alg: 'RS256', use: 'sig' };
}

const key = await signingKey('loraplex-test');
const foreignKey = await generateKeyPair('RS256');

const provider = new Provider(issuer, {
  clients: [{
    client_id: clientId,
    client_secret: clientSecret,
    redirect_uris: [redirectUri],
    grant_types: ['authorization_code', 'refresh_token'],
    response_types: ['code'],
  }],
  jwks: { keys: [key] },
  cookies: { keys: [randomBytes(32).toString('hex')] },
  claims: {
    openid: ['sub'],
    email: ['email', 'email_verified'],
    profile: ['name'],
    groups: ['groups'],
  },
  scopes: ['openid', 'offline_access', 'email', 'profile', 'groups'],
  features: { devInteractions: { enabled: false } },
  pkce: { required: () => true },
  // Refresh tokens without `prompt=consent`: the console renews a session with one.
  issueRefreshToken: async (_ctx, client) => client.grantTypeAllowed('refresh_token'),
  // Every refresh spends its token and issues a new one; spending one twice revokes the grant
  // (as providers with refresh token rotation do).
  rotateRefreshToken: true,
  interactions: { url: (_ctx, interaction) => `/interaction/${interaction.uid}` },
  async findAccount(_ctx, id) {
    const account = accounts.get(id);
    if (!account) return undefined;
    return { accountId: id, claims: async () => ({ sub: id, ...accounts.get(id) }) };
  },
});

async function readBody(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  return Buffer.concat(chunks).toString();
}

async function retamper(body) {
  const change = tamper;
  tamper = null;
  const payload = decodeJwt(body.id_token);
  const { kid } = decodeProtectedHeader(body.id_token);
  Object.assign(payload, change.claims ?? {});
  if (change.expired) {
    payload.iat -= 7200;
    payload.exp = payload.iat + 600;
  }
  const signer = new SignJWT(payload).setProtectedHeader({ alg: 'RS256', kid });
  const privateKey = change.foreign_key ? foreignKey.privateKey : await importJWK(key, 'RS256');
  body.id_token = await signer.sign(privateKey);
}

async function testRoutes(ctx, next) {
  const account = ctx.path.match(/^\/test\/accounts\/([\w.-]+)$/);
  const interaction = ctx.path.match(/^\/interaction\/([\w-]+)(\/login)?$/);
  if (account && ctx.method === 'PUT') {
    accounts.set(account[1], JSON.parse(await readBody(ctx.req)));
    ctx.status = 204;
  } else if (account && ctx.method === 'DELETE') {
    accounts.delete(account[1]);
    ctx.status = 204;
  } else if (ctx.path === '/test/tamper' && ctx.method === 'POST') {
    tamper = JSON.parse(await readBody(ctx.req));
    ctx.status = 204;
  } else if (interaction && !interaction[2] && ctx.method === 'GET') {
    await provider.interactionDetails(ctx.req, ctx.res);
    ctx.body = `sign in: POST /interaction/${interaction[1]}/login`;
  } else if (interaction && interaction[2] && ctx.method === 'POST') {
    await finishLogin(ctx);
  } else {
    await next();
    if (ctx.path === '/token' && tamper && ctx.body?.id_token) await retamper(ctx.body);
  }
}

async function finishLogin(ctx) {
  const details = await provider.interactionDetails(ctx.req, ctx.res);
  const accountId = new URLSearchParams(await readBody(ctx.req)).get('login');
  if (!accounts.has(accountId)) {
    ctx.status = 400;
    ctx.body = 'unknown account';
    return;
  }
  const grant = new provider.Grant({ accountId, clientId: details.params.client_id });
  grant.addOIDCScope(details.params.scope);
  const grantId = await grant.save();
  const result = { login: { accountId }, consent: { grantId } };
  await provider.interactionFinished(ctx.req, ctx.res, result, { mergeWithLastSubmission: false });
  ctx.respond = false;
}

provider.use(testRoutes);
// The test process holds our stdin open: when it ends, however it ends, so do we.
process.stdin.on('end', () => process.exit(0));
process.stdin.resume();
provider.listen(Number(port), '127.0.0.1', () => console.log(`ready ${issuer}`));
