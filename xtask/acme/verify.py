"""A relying party of a custom domain, as a Python service would be one: PyJWT's PyJWKClient
fetches the key set over HTTPS, trusting only the ACME CA's root, and verifies a token against
it, with its issuer and audience.
Usage: verify.py JWKS_URL TOKEN ISSUER AUDIENCE ROOT_PEM ADDRESS
(ADDRESS: the replica the JWKS URL's host stands for) — prints the token's kid, exit 1 if refused."""
import socket
import ssl
import sys
from urllib.parse import urlsplit

import jwt

url, token, issuer, audience, root, address = sys.argv[1:7]
domain = urlsplit(url).hostname

# The custom domain exists only in the chore's DNS server (pebble-challtestsrv), which the
# machine's resolver does not ask, and urllib has nothing like curl's --resolve: the domain
# resolves to the replica's loopback address here, and only here. TLS is unchanged: the
# handshake still names the domain (SNI) and the certificate is checked against it.
real_getaddrinfo = socket.getaddrinfo


def to_the_replica(host, port, *args, **kwargs):
    if host == domain:
        host = address
    return real_getaddrinfo(host, port, *args, **kwargs)


socket.getaddrinfo = to_the_replica

# Given a file, create_default_context loads it alone: the system's roots are not trusted.
context = ssl.create_default_context(cafile=root)
client = jwt.PyJWKClient(url, cache_keys=False, ssl_context=context)
try:
    key = client.get_signing_key_from_jwt(token)
    jwt.decode(token, key.key, algorithms=["RS256"], audience=audience, issuer=issuer)
except jwt.PyJWTError as error:
    print(f"refused: {error}", file=sys.stderr)
    sys.exit(1)
print(jwt.get_unverified_header(token)["kid"])
