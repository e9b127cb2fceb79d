// A relying party as a Node service would be one: jose's createRemoteJWKSet fetches the key set
// (through the cache in front of the registry) and verifies a token against it.
// Usage: node verify.mjs JWKS_URL TOKEN USER_AGENT — prints the token's kid, exit 1 if refused.
import dns from 'node:dns';
import { createRemoteJWKSet, jwtVerify, decodeProtectedHeader } from 'jose';

// The issuers are `*.localhost` hosts, which the machine's resolver may not know.
const real = dns.lookup;
dns.lookup = (host, options, callback) =>
  real(host.endsWith('.localhost') ? '127.0.0.1' : host, options, callback);

const [url, token, agent] = process.argv.slice(2);
const keys = createRemoteJWKSet(new URL(url), { headers: { 'user-agent': agent } });
try {
  await jwtVerify(token, keys);
  console.log(decodeProtectedHeader(token).kid);
} catch (error) {
  console.error(`refused: ${error.code ?? ''} ${error.message}`);
  process.exit(1);
}
