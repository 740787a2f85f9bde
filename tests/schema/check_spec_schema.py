#!/usr/bin/python3
"""The published spec schema (docs/spec.schema.json) against an independent validator (python3-jsonschema).

Every shipped experiment spec must pass it (the schema is a relaxation of `chaosbed validate`), and mutants of
a shipped spec that break one rule the schema can express must fail both the schema and `chaosbed validate`.
Exit 0 when all hold, 1 with every failure listed, 77 (skip) when python3-jsonschema is missing.

Usage: check_spec_schema.py CHAOSBED REPO
"""
import copy
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

try:
    import jsonschema
    import yaml
except ImportError as e:  # the tests' packages come from scripts/install-deps.sh
    print(f"SKIP: {e.name} is not installed (Debian: python3-jsonschema, python3-yaml)")
    sys.exit(77)


class Yaml12Loader(yaml.SafeLoader):
    """Reads scalars as YAML 1.2's core schema does, as yaml-cpp and editors' YAML language server do:
    `on`, `yes` and `off` are strings, `1e-3` is a number."""


Yaml12Loader.yaml_implicit_resolvers = {
    k: [(tag, rx) for tag, rx in v if tag not in ("tag:yaml.org,2002:bool", "tag:yaml.org,2002:float",
                                                  "tag:yaml.org,2002:int")]
    for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
Yaml12Loader.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
                                   list("tTfF"))
Yaml12Loader.add_implicit_resolver("tag:yaml.org,2002:int", re.compile(r"^[-+]?[0-9]+$"), list("-+0123456789"))
Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"),
    list("-+.0123456789"))


def bool12(loader, node):
    return loader.construct_scalar(node) in ("true", "True", "TRUE")


Yaml12Loader.add_constructor("tag:yaml.org,2002:bool", bool12)


def load(path):
    with open(path) as f:
        return yaml.load(f, Loader=Yaml12Loader)


def errors(validator, doc):
    return [f"{'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}" for e in validator.iter_errors(doc)]


def validate_exit(chaosbed, doc):
    fd, path = tempfile.mkstemp(suffix=".yaml")
    try:
        with os.fdopen(fd, "w") as f:
            yaml.safe_dump(doc, f, sort_keys=False)
        return subprocess.run([chaosbed, "validate", path], capture_output=True, text=True).returncode
    finally:
        os.unlink(path)


def main():
    chaosbed, repo = sys.argv[1], sys.argv[2]
    with open(os.path.join(repo, "docs/spec.schema.json")) as f:
        schema = json.load(f)
    jsonschema.Draft7Validator.check_schema(schema)
    validator = jsonschema.Draft7Validator(schema)
    failures = []

    specs = sorted(glob.glob(os.path.join(repo, "experiments/scenarios/*.yaml")) +
                   glob.glob(os.path.join(repo, "bench/scenarios/*.yaml")))
    if not specs:
        failures.append("no shipped specs found under experiments/scenarios")
    for path in specs:
        for e in errors(validator, load(path)):
            failures.append(f"{os.path.relpath(path, repo)}: the schema rejects a shipped spec: {e}")

    # One rule broken per mutant; each is a rule of the parser, so validate must refuse it too. The base has
    # no relative paths, so its mutants validate the same from a temporary file.
    base_path = os.path.join(repo, "experiments/scenarios/default.yaml")
    base = load(base_path)
    mutants = {
        "cluster.workers: 0": lambda d: d["cluster"].__setitem__("workers", 0),
        "cluster.workers: 2.5": lambda d: d["cluster"].__setitem__("workers", 2.5),
        "cluster.transport: tcp": lambda d: d["cluster"].__setitem__("transport", "tcp"),
        "an unknown top-level key": lambda d: d.__setitem__("bogus", 1),
        "an unknown cluster key": lambda d: d["cluster"].__setitem__("worker", 4),
        "no metadata": lambda d: d.pop("metadata"),
        "no metadata.name": lambda d: d["metadata"].pop("name"),
        "strategies[0].name: allreduce": lambda d: d["strategies"][0].__setitem__("name", "allreduce"),
        "training.learning_rate: -1": lambda d: d["training"].__setitem__("learning_rate", -1),
        "training.momentum: 1": lambda d: d["training"].__setitem__("momentum", 1),
        "training.target_accuracy: 1.5": lambda d: d["training"].__setitem__("target_accuracy", 1.5),
        "a fault's action: explode": lambda d: d["chaos"]["faults"][0].__setitem__("action", "explode"),
        "a fault without a name": lambda d: d["chaos"]["faults"][0].pop("name"),
        "a fault's target index: -1": lambda d: d["chaos"]["faults"][0]["target"].__setitem__("index", -1),
        "restart_after: sometimes": lambda d: d["chaos"]["faults"][0].__setitem__("restart_after", "sometimes"),
        "apiVersion: chaosbed/v0": lambda d: d.__setitem__("apiVersion", "chaosbed/v0"),
        "metrics.allow_remote: 'yes'": lambda d: d.setdefault("metrics", {}).__setitem__("allow_remote", "yes"),
    }
    if errors(validator, base):
        failures.append("the mutants' base, experiments/scenarios/default.yaml, fails the schema")
    for what, mutate in mutants.items():
        doc = copy.deepcopy(base)
        mutate(doc)
        if not errors(validator, doc):
            failures.append(f"mutant '{what}': the schema accepts it")
        code = validate_exit(chaosbed, doc)
        if code != 3:
            failures.append(f"mutant '{what}': chaosbed validate exited {code}, not 3 (invalid spec)")

    for f in failures:
        print("FAIL:", f)
    print(f"{len(specs)} shipped specs and {len(mutants)} mutants checked; {len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
