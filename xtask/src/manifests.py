# Run by `cargo xtask manifests` (xtask/src/manifests.rs) with the Python of
# target/kubernetes-validate/venv: python xtask/src/manifests.py SCHEMA_DIR MANIFEST...
#
# Every document of every manifest is validated, strictly: a built-in kind against the
# Kubernetes schemas that kubernetes-validate bundles, a custom resource (cert-manager's
# Certificate) against the JSON schema of SCHEMA_DIR whose apiVersion and kind it names. A kind
# with neither is refused: kubernetes-validate's command line only warns about those, and would
# pass a Certificate unchecked. One line per document; exit 1 when any is invalid.
import json
import pathlib
import sys

import jsonschema
import yaml
from kubernetes_validate import utils

KUBERNETES = "1.37.0"


def pointer(path):
    return "/" + "/".join(str(p) for p in path)


def main(schema_dir, manifests):
    custom = {}
    for path in sorted(pathlib.Path(schema_dir).glob("*.json")):
        schema = json.loads(path.read_text())
        jsonschema.Draft202012Validator.check_schema(schema)
        properties = schema["properties"]
        key = (properties["apiVersion"]["const"], properties["kind"]["const"])
        custom[key] = (path.name, jsonschema.Draft202012Validator(schema))

    failures = 0
    for manifest in manifests:
        with open(manifest) as f:
            documents = [d for d in yaml.safe_load_all(f) if d is not None]
        for document in documents:
            key = (document.get("apiVersion"), document.get("kind"))
            name = (document.get("metadata") or {}).get("name")
            what = f"{manifest}: {key[0]} {key[1]}/{name}"
            if key in custom:
                schema_name, validator = custom[key]
                errors = sorted(validator.iter_errors(document), key=lambda e: list(e.path))
                for e in errors:
                    print(f"{what}: INVALID at {pointer(e.path)}: {e.message}")
                if errors:
                    failures += 1
                else:
                    print(f"{what}: valid ({schema_name})")
                continue
            try:
                version = utils.validate(document, KUBERNETES, strict=True)
                print(f"{what}: valid (Kubernetes {version}, strict)")
            except utils.ValidationError as e:
                print(f"{what}: INVALID at {pointer(e.path)}: {e.message}")
                failures += 1
            except utils.SchemaNotFoundError:
                print(f"{what}: INVALID: no schema, neither Kubernetes' nor one of {schema_dir}")
                failures += 1
    return 1 if failures else 0


sys.exit(main(sys.argv[1], sys.argv[2:]))
