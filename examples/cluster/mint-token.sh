#!/bin/sh
# A stand-in for a cluster's token issuer: prints a service account token signed by the sample
# key N (key-N.pem, published as jwks-N.json), valid for ten minutes.
#
#   examples/cluster/mint-token.sh N ISSUER AUDIENCE SUBJECT
#   examples/cluster/mint-token.sh 2 http://k3s-acme.localhost:8080 sts.amazonaws.com system:serviceaccount:ci:deployer
#
# The keys are samples, public in this repository: never trust them outside a walk-through.
set -eu
if [ "$#" -ne 4 ]; then
  echo "usage: $0 N ISSUER AUDIENCE SUBJECT" >&2
  exit 2
fi
dir=$(dirname "$0")
b64url() { openssl base64 -A | tr '+/' '-_' | tr -d '='; }
now=$(date +%s)
kid=$(jq -r '.keys[0].kid' "$dir/jwks-$1.json")
header=$(jq -cn --arg kid "$kid" '{alg: "RS256", typ: "JWT", kid: $kid}' | b64url)
payload=$(jq -cn --arg iss "$2" --arg aud "$3" --arg sub "$4" --argjson now "$now" \
  '{iss: $iss, aud: $aud, sub: $sub, iat: $now, nbf: $now, exp: ($now + 600)}' | b64url)
signature=$(printf '%s.%s' "$header" "$payload" \
  | openssl dgst -sha256 -sign "$dir/key-$1.pem" -binary | b64url)
printf '%s.%s.%s\n' "$header" "$payload" "$signature"
