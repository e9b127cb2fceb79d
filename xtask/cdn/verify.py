"""A relying party as a Python service would be one: PyJWT's PyJWKClient fetches the key set
(through the cache in front of the registry) and verifies a token against it.
Usage: verify.py JWKS_URL TOKEN USER_AGENT — prints the token's kid, exit 1 if refused."""
import socket
import sys

import jwt

# The issuers are `*.localhost` hosts, which the machine's resolver may not know.
real_getaddrinfo = socket.getaddrinfo


def loopback(host, port, *args, **kwargs):
    if isinstance(host, str) and host.endswith(".localhost"):
        host = "127.0.0.1"
    return real_getaddrinfo(host, port, *args, **kwargs)


socket.getaddrinfo = loopback

url, token, agent = sys.argv[1:4]
client = jwt.PyJWKClient(url, cache_keys=False, headers={"User-Agent": agent})
try:
    key = client.get_signing_key_from_jwt(token)
    jwt.decode(token, key.key, algorithms=["RS256", "ES256"], options={"verify_aud": False})
except jwt.PyJWTError as error:
    print(f"refused: {error}", file=sys.stderr)
    sys.exit(1)
print(jwt.get_unverified_header(token)["kid"])
