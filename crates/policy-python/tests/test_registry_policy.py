"""The module registry_policy against the Rust engine's own expectations: the
golden policy test cases that `registry policy test` runs (crates/policy/tests/cases), the policy
fixtures of the schema (tests/fixtures/policies), and the examples of the README."""

import _thread
import ipaddress
import json
import random
import re
import signal
import threading
import time
from pathlib import Path

import pytest

import registry_policy
from registry_policy import Policy, PolicyError, compare, lint

ROOT = Path(__file__).resolve().parents[3]
CASES = ROOT / "crates" / "policy" / "tests" / "cases"
FIXTURES = ROOT / "tests" / "fixtures" / "policies"


def read(path):
    return json.loads(path.read_text(encoding="utf-8"))


def golden_cases():
    """(policy file, case) for every case of every NAME.policy.json with its NAME.cases.json."""
    found = []
    for policy_path in sorted(CASES.glob("*.policy.json")):
        cases_path = policy_path.with_name(policy_path.name.replace(".policy.", ".cases."))
        for case in read(cases_path):
            found.append(pytest.param(policy_path, case, id=f"{policy_path.stem}: {case['name']}"))
    return found


GOLDEN = golden_cases()


def test_the_golden_files_are_there():
    # As many as the Rust test (crates/policy/tests/golden_cases.rs) insists on.
    assert len({p.values[0] for p in GOLDEN}) >= 2
    assert len(GOLDEN) >= 30


@pytest.mark.parametrize("policy_path, case", GOLDEN)
def test_a_golden_case_is_decided_as_the_engine_decides_it(policy_path, case):
    policy = Policy(read(policy_path))
    service, ip, action = case.get("service"), case.get("ip"), case.get("action")
    explained = policy.explain(case["claims"], service, ip, action)
    assert explained["decision"] == case["expect"], explained
    rule = explained["rule"]["index"] if explained["rule"] is not None else None
    assert rule == case.get("rule"), explained
    if rule is not None:
        assert explained["rule"]["pointer"] == f"/rules/{rule}"
    assert policy.evaluate(case["claims"], service, ip, action) is (case["expect"] == "allow")
    # The same policy given as JSON text decides the same.
    assert Policy(policy_path.read_text(encoding="utf-8")).evaluate(
        case["claims"], service, ip, action=action
    ) is (case["expect"] == "allow")


def fixtures(kind):
    paths = sorted((FIXTURES / kind).glob("*.json"))
    return [pytest.param(read(path), id=path.stem) for path in paths]


@pytest.mark.parametrize("document", fixtures("valid"))
def test_a_valid_fixture_is_a_policy(document):
    Policy(document)
    assert all(f["severity"] == "warning" for f in lint(document))


@pytest.mark.parametrize("fixture", fixtures("invalid"))
def test_an_invalid_fixture_raises_every_problem_with_its_pointer(fixture):
    with pytest.raises(PolicyError) as raised:
        Policy(fixture["document"])
    errors = raised.value.errors
    assert {e["pointer"] for e in errors} == set(fixture["pointers"])
    assert all(set(e) == {"pointer", "message"} and len(e["message"]) > 10 for e in errors)
    findings = lint(fixture["document"])
    assert {(f["code"], f["severity"]) for f in findings} == {("schema", "error")}
    assert {f["pointer"] for f in findings} == set(fixture["pointers"])


def oidc(*rules, **extra):
    return {
        "kind": "oidc",
        "rules": [
            {"services": services, "claims": {"iss": "https://ci.example", "aud": "registry", "sub": sub}}
            for sub, services in rules
        ],
        **extra,
    }


def token(sub):
    return {"iss": "https://ci.example", "aud": "registry", "sub": sub}


def test_a_missing_member_is_named_by_its_own_pointer():
    document = {"kind": "oidc", "rules": [{"services": ["*"], "claims": {"iss": "https://ci.example/*", "aud": "x"}}]}
    with pytest.raises(PolicyError) as raised:
        Policy(document)
    pointers = [e["pointer"] for e in raised.value.errors]
    assert "/rules/0/claims/sub" in pointers  # required, and missing
    assert "/rules/0/claims/iss" in pointers  # no wildcard in iss
    assert str(raised.value).startswith("not a valid policy: ")
    assert isinstance(raised.value, ValueError)


def test_a_text_that_is_not_json_is_a_policy_error():
    for call in (Policy, lint, lambda d: compare(d, d)):
        with pytest.raises(PolicyError) as raised:
            call("{ nope")
        assert raised.value.errors[0]["pointer"] == ""
        assert raised.value.errors[0]["message"].startswith("not JSON: ")


def test_a_member_named_twice_is_refused_as_the_registry_refuses_it():
    # Python's json keeps the last member, serde_json too: the registry refuses such a text,
    # so the module must not read an allow-all into a document the registry would refuse.
    twice = '{"kind": "static", "services": ["api-acme"], "services": ["*"]}'
    for call in (Policy, lint, lambda d: compare(d, d)):
        with pytest.raises(PolicyError) as raised:
            call(twice)
        message = raised.value.errors[0]["message"]
        assert 'the member "services" appears twice' in message, message


def test_what_json_cannot_hold_is_refused():
    with pytest.raises(TypeError):
        Policy({"kind": "static", "services": {"api-acme"}})
    with pytest.raises(ValueError):
        Policy(oidc(("x", ["*"]))).evaluate({"iss": float("nan")}, None)
    with pytest.raises(TypeError):
        Policy(oidc(("x", ["*"]))).evaluate(["not", "a", "dict"], None)


def test_evaluate_takes_claims_service_and_address():
    policy = Policy(oidc(("repo:acme/*", ["api-acme"]), ip_allowlist=["203.0.113.0/24", "2001:db8::/32"]))
    claims = token("repo:acme/api")
    assert policy.evaluate(claims, "api-acme") is True
    assert policy.evaluate(claims, "API-ACME", ip="203.0.113.9") is True
    assert policy.evaluate(claims, "api-acme", ipaddress.ip_address("2001:db8::1")) is True
    assert policy.evaluate(claims, "api-acme", "198.51.100.1") is False
    assert policy.evaluate(claims, "web-acme") is False
    assert policy.evaluate(claims, None) is True  # a call on no one service
    assert policy.evaluate(None, "api-acme") is False  # a static token, an oidc policy
    with pytest.raises(ValueError, match="not an IPv4 or IPv6 address"):
        policy.evaluate(claims, "api-acme", "203.0.113.300")
    with pytest.raises(TypeError):
        policy.evaluate(claims)  # the service is required (None for no one service)


def test_a_static_policy_decides_for_a_static_token():
    policy = Policy('{"kind": "static", "services": ["api-*"], "ip_allowlist": ["10.0.0.0/8"]}')
    assert policy.evaluate(None, "api-acme")
    assert policy.evaluate(None, "api-acme", "10.1.2.3")
    assert not policy.evaluate(None, "api-acme", "11.0.0.1")
    assert not policy.evaluate(None, "web-acme")
    assert not policy.evaluate(token("x"), "api-acme")  # an identity token, a static policy


def test_explain_is_the_body_of_the_http_explain():
    policy = Policy(oidc(("repo:acme/infra:ref:refs/heads/main", ["api-acme"]), ("repo:acme/web:*", ["web-acme"])))
    assert policy.explain(token("repo:acme/web:ref:x"), "web-acme") == {
        "decision": "allow",
        "rule": {"index": 1, "pointer": "/rules/1"},
        "reasons": [],
        "hints": [],
    }
    # The README's example of `registry policy explain` (and tests/integration/api/ops.rs's).
    refused = policy.explain(token("repo:Acme/infra:ref:refs/heads/main"), service="api-acme")
    assert refused == {
        "decision": "deny",
        "rule": None,
        "reasons": [
            {
                "code": "claim-mismatch",
                "message": 'sub "repo:Acme/infra:ref:refs/heads/main" does not match "repo:acme/infra:ref:refs/heads/main"',
                "rule": 0,
                "pointer": "/rules/0/claims/sub",
            },
            {
                "code": "claim-mismatch",
                "message": 'sub "repo:Acme/infra:ref:refs/heads/main" does not match "repo:acme/web:*"',
                "rule": 1,
                "pointer": "/rules/1/claims/sub",
            },
        ],
        "hints": [
            {
                "rule": 0,
                "pointer": "/rules/0/claims/sub",
                "message": '"repo:Acme/infra:ref:refs/heads/main" differs from "repo:acme/infra:ref:refs/heads/main" '
                "only in case: matching is case-sensitive",
            }
        ],
    }
    # Keyword arguments, and the defaults: no service, no address.
    assert policy.explain(claims=token("repo:acme/web:x"))["decision"] == "allow"
    outside = Policy(oidc(("*", ["*"]), ip_allowlist=["203.0.113.0/24"])).explain(token("x"), ip="192.0.2.1")
    assert [r["code"] for r in outside["reasons"]] == ["address-not-allowed"]
    assert outside["reasons"][0]["pointer"] == "/ip_allowlist"


def test_lint_returns_the_findings():
    document = {
        "kind": "oidc",
        "rules": [{"services": ["*"], "claims": {"iss": "https://token.actions.githubusercontent.com", "aud": "registry", "sub": "*"}}],
    }
    findings = lint(document)
    assert [f["code"] for f in findings] == ["any-subject", "wildcard-services", "github-subject-without-repository"]
    assert all(set(f) == {"code", "severity", "pointer", "message"} for f in findings)
    assert findings[0]["pointer"] == "/rules/0/claims/sub"
    assert lint(json.dumps(document)) == findings
    assert lint(Policy(document)) == findings
    assert lint(oidc(("repo:acme/api", ["api-acme"]))) == []


def test_compare_says_whether_new_widens_old():
    old = oidc(("repo:acme/api:*", ["api-acme"]), ("repo:acme/web:*", ["web-*"]), ip_allowlist=["203.0.113.0/24"])
    narrower = oidc(("repo:acme/api:ref:refs/heads/main", ["api-acme"]), ip_allowlist=["203.0.113.7"])
    assert compare(old, narrower) == {"result": "narrower-or-equal", "witnesses": []}

    wider = oidc(("repo:acme/api:*", ["api-acme"]), ("repo:acme/*", ["web-*"]), ip_allowlist=["203.0.113.0/24"])
    comparison = compare(json.dumps(old), Policy(wider))
    assert comparison["result"] == "widens"
    assert comparison["witnesses"]
    for witness in comparison["witnesses"]:
        assert set(witness) <= {"rule", "claims", "service", "ip", "action"}
        args = (witness["claims"], witness["service"], witness.get("ip"))
        # Every witness is a request NEW admits and OLD refuses.
        assert Policy(wider).evaluate(*args)
        assert not Policy(old).evaluate(*args)
    assert comparison["witnesses"][0]["rule"] == 1

    # `repo:?*` accepts every subject `repo:*a` does, which the proof does not see.
    undetermined = compare(oidc(("repo:?*", ["api-acme"])), oidc(("repo:*a", ["api-acme"])))
    assert undetermined == {"result": "undetermined", "witnesses": []}

    static = compare('{"kind": "static", "services": ["api-*"]}', {"kind": "static", "services": ["*"]})
    assert static["result"] == "widens"
    assert static["witnesses"][0]["claims"] is None
    assert "ip" not in static["witnesses"][0]


def test_the_module_says_its_version_and_api():
    assert re.fullmatch(r"\d+\.\d+\.\d+", registry_policy.__version__)
    assert set(registry_policy.__all__) == {"Policy", "PolicyError", "lint", "compare", "__version__"}
    assert issubclass(PolicyError, ValueError)


def python_examples(path, heading):
    """The ```python blocks of the section `heading` of the Markdown file `path`."""
    text = path.read_text(encoding="utf-8")
    section = text.split(heading, 1)[1]
    section = re.split(r"\n## ", section, maxsplit=1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


@pytest.mark.parametrize(
    "path, heading",
    [
        (ROOT / "README.md", "\n## Embed the policy engine"),
        (ROOT / "crates" / "policy-python" / "README.md", "# registry-policy for Python"),
    ],
    ids=["README", "crates/policy-python/README"],
)
def test_the_readme_examples_run(path, heading):
    examples = python_examples(path, heading)
    assert examples, f"{path}: no python example under {heading.strip()}"
    for example in examples:
        exec(compile(example, str(path), "exec"), {})


V2 = "https://registry.example/schemas/service-account-policy/v2.json"


def test_a_request_on_the_whole_customer_is_judged_on_every_service():
    # Managing accounts and reading the audit trail need a rule covering every service, as the
    # registry (and its explain) judges them; listing services does not.
    narrow = Policy({"kind": "static", "services": ["api-*"]})
    assert narrow.evaluate(None, None, action="accounts:write") is False
    assert narrow.explain(None, action="audit:read")["decision"] == "deny"
    assert narrow.evaluate(None, None, action="services:read") is True
    wide = Policy({"kind": "static", "services": ["*"]})
    assert wide.evaluate(None, None, action="accounts:write") is True
    assert wide.explain(None, action="accounts:read")["decision"] == "allow"


def test_version_2_documents_allow_their_actions():
    policy = Policy({"$schema": V2, "kind": "static", "services": ["api-acme"],
                     "actions": ["config:read", "config:write"]})
    assert policy.version == 2
    assert Policy({"kind": "static", "services": ["*"]}).version == 1
    assert policy.evaluate(None, "api-acme", action="config:write") is True
    assert policy.evaluate(None, "api-acme", None, "accounts:write") is False
    assert policy.evaluate(None, "api-acme") is True  # no action: not checked
    explained = policy.explain(None, "api-acme", action="audit:read")
    assert explained["decision"] == "deny"
    assert explained["reasons"][0]["code"] == "action-not-allowed"
    assert "audit:read" in explained["reasons"][0]["message"]
    with pytest.raises(ValueError, match="not an action"):
        policy.evaluate(None, "api-acme", action="config:delete")
    with pytest.raises(ValueError, match="not an action"):
        policy.explain(None, "api-acme", action="*")
    with pytest.raises(PolicyError) as raised:
        Policy({"$schema": V2, "kind": "static", "services": ["*"], "actions": ["config:read", "nope"]})
    assert [e["pointer"] for e in raised.value.errors] == ["/actions/1"]
    rule = {"services": ["*"], "actions": ["services:read"],
            "claims": {"iss": "https://ci.example", "aud": "registry", "sub": "repo:acme/*"}}
    oidc_v2 = Policy({"$schema": V2, "kind": "oidc", "rules": [rule]})
    assert oidc_v2.evaluate(token("repo:acme/api"), None, action="services:read") is True
    assert oidc_v2.evaluate(token("repo:acme/api"), None, action="services:write") is False
    wider = dict(rule, actions=["services:read", "services:write"])
    compared = compare(oidc_v2, {"$schema": V2, "kind": "oidc", "rules": [wider]})
    assert compared["result"] == "widens"
    assert compared["witnesses"][0]["action"] == "services:write"


def test_the_size_limits_apply_before_anything_is_compiled():
    sub = "*" + "".join(chr(0x10000 + i) + "?" for i in range(30_000)) + "*"
    document = {"kind": "oidc", "rules": [{"services": ["*"],
                "claims": {"iss": "https://ci.example", "aud": "registry", "sub": sub}}]}
    started = time.monotonic()
    with pytest.raises(PolicyError) as raised:
        Policy(document)
    assert time.monotonic() - started < 1
    pointers = [e["pointer"] for e in raised.value.errors]
    assert pointers == ["", "/rules/0/claims/sub"]


def adversarial(seed, length):
    """A pattern of ?, * and two letters that makes the proof of compare work hard."""
    rng = random.Random(seed)
    return "".join(rng.choice("ab?*a?") for _ in range(length))


def test_a_long_compare_can_be_interrupted():
    rules = [{"services": ["*"], "claims": {"iss": "https://ci.example",
              "aud": adversarial(2 * i, 230), "sub": adversarial(2 * i + 1, 230)}}
             for i in range(30)]
    policy = Policy({"kind": "oidc", "rules": rules})
    interrupted = []
    # A process started in the background by a non-interactive shell (nohup, CI, a service
    # manager) inherits SIGINT ignored, and Python then installs no handler for it:
    # interrupt_main() would do nothing. The test checks the binding, not how its process was
    # started, so it sets Python's own handler for its duration.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.2, lambda: (interrupted.append(time.monotonic()), _thread.interrupt_main()))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                compare(policy, policy)
        assert interrupted, "the timer fired"
        assert time.monotonic() - interrupted[0] < 1
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
