#!/usr/bin/python3
"""events.jsonl against the published event schema (docs/events.schema.json), with python3-jsonschema.

  check_events.py validate SCHEMA FILE...   every line of each FILE is one event the schema accepts
  check_events.py run CHAOSBED REPO         runs a short experiment with a fault of every kind that ends or
                                            stops a node, both strategies and their recoveries; every event
                                            must pass, the run's kinds of event must all appear, and mutants of
                                            its events (unknown type, a field missing, a field mistyped, an
                                            unknown field) must fail

Exit 0 when all hold, 1 with every failure listed, 77 (skip) when python3-jsonschema is missing.
"""
import copy
import json
import os
import subprocess
import sys
import tempfile

try:
    import jsonschema
except ImportError as e:  # the tests' packages come from scripts/install-deps.sh
    print(f"SKIP: {e.name} is not installed (Debian: python3-jsonschema)")
    sys.exit(77)


def load_validator(schema_path):
    with open(schema_path) as f:
        schema = json.load(f)
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def errors(validator, event):
    return [f"{'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}" for e in validator.iter_errors(event)]


def read_events(path):
    """(line number, event or None, text) for every line of an events.jsonl."""
    with open(path) as f:
        for n, line in enumerate(f, 1):
            try:
                yield n, json.loads(line), line
            except json.JSONDecodeError:
                yield n, None, line


def validate(validator, paths):
    failures, count = [], 0
    for path in paths:
        for n, event, text in read_events(path):
            count += 1
            if event is None:
                failures.append(f"{path}:{n}: not JSON: {text[:120]!r}")
                continue
            failures += [f"{path}:{n}: {event.get('type', '?')}: {m}" for m in errors(validator, event)]
    return failures, count


RUN_SPEC = """apiVersion: chaosbed/v1alpha1
kind: Experiment
metadata: {name: events-schema}
seed: 11
cluster: {workers: 3, servers: 2, cpu_per_node: 0}
model: {kind: mlp, layers: [32, 32, 4]}
data: {dataset: synthetic, samples: 4096, dims: 32, classes: 4}
training: {batch_per_worker: 32, learning_rate: 0.1, momentum: 0.9, target_accuracy: 0.999, time_limit_s: 7,
           eval_interval_s: 0.5, checkpoint_interval_s: 1, sustained_evals: 100}
strategies:
  - {name: mirrored, on_failure: elastic, checkpoint_on_notice: true}
  - {name: parameter_server, on_server_failure: shard_restart, checkpoint_on_notice: true}
chaos:
  faults:
    - {name: kill-w1, action: kill, target: {role: worker, index: 1}, at_s: 1.5, restart_after: {fixed_s: 0.5}}
    - {name: pause-w2, action: pause, target: {role: worker, index: 2}, at_s: 3.0, duration_s: 0.5}
    - {name: slow-w0, action: slow, target: {role: worker, index: 0}, at_s: 4.0, duration_s: 0.5,
       params: {cpu_fraction: 0.5}}
    - {name: preempt-w2, action: preempt, target: {role: worker, index: 2}, at_s: 4.5, params: {grace_s: 0.5},
       restart_after: {fixed_s: 0.5}}
    - {name: kill-ps0, action: kill, target: {role: ps, index: 0}, at_s: 5.5, restart_after: {fixed_s: 0.5}}
"""

# Event types this run must produce (the node events, the supervisor's, and chaos's for these kinds).
EXPECTED = {"run.start", "run.stop", "eval", "checkpoint", "node.exited", "node.restarted", "recovery",
            "fault.episode", "membership", "membership_changed", "chaos.planned", "chaos.applied", "chaos.reverted",
            "chaos.replaced", "chaos.skipped", "restored", "rollback", "recovered", "left_on_notice",
            "failure_detected"}


def required_by_every_shape(schema, type_name):
    """The fields an event of this type needs whichever writer's shape it has, its own before the common ones."""
    d = schema["definitions"][type_name]
    shapes = d.get("oneOf", [d])
    needed = set.intersection(*(set(s["required"]) for s in shapes)) - {"type"}
    common = {"strategy", "mono_ns", "wall_ns", "node", "incarnation", "t"}
    return sorted(needed - common) + sorted(needed & common)


def mutants(schema, event):
    """Events that break one rule each: the schema must refuse every one."""
    out = [("unknown type", dict(event, type="no.such.event")),
           ("unknown field", dict(event, no_such_field=1))]
    required = required_by_every_shape(schema, event["type"])
    if required:
        m = copy.deepcopy(event)
        del m[required[0]]
        out.append((f"without {required[0]}", m))
    for k, v in event.items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            out.append((f"{k} as a string", dict(event, **{k: str(v)})))
            break
    return out


def run(chaosbed, repo):
    validator = load_validator(os.path.join(repo, "docs/events.schema.json"))
    failures = []
    with tempfile.TemporaryDirectory(prefix="chaosbed-events-") as tmp:
        spec = os.path.join(tmp, "spec.yaml")
        with open(spec, "w") as f:
            f.write(RUN_SPEC)
        out = os.path.join(tmp, "out")
        p = subprocess.run([chaosbed, "run", spec, f"--out={out}", "--metrics_addr=127.0.0.1:0"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=240)
        if p.returncode != 0:
            print(p.stdout[-4000:])
            return [f"chaosbed run exited {p.returncode}"]
        path = os.path.join(out, "events.jsonl")
        bad, count = validate(validator, [path])
        failures += bad
        events = [e for _, e, _ in read_events(path) if e is not None]
        seen = {e.get("type") for e in events}
        failures += [f"no {t!r} event in the run (seen: {sorted(seen)})" for t in sorted(EXPECTED - seen)]
        # One event of each type, mutated: an accepted mutant means the schema does not hold that rule.
        first = {}
        for e in events:
            first.setdefault(e.get("type"), e)
        for t, e in sorted(first.items()):
            for what, m in mutants(validator.schema, e):
                if not errors(validator, m):
                    failures.append(f"{t}: the schema accepts a mutant {what}: {json.dumps(m)[:200]}")
        print(f"{count} events of {len(seen)} types checked, {sum(len(mutants(validator.schema, e)) for e in first.values())} mutants")
    return failures


def main(argv):
    if len(argv) >= 3 and argv[1] == "validate":
        failures, count = validate(load_validator(argv[2]), argv[3:])
        print(f"{count} events checked")
    elif len(argv) == 4 and argv[1] == "run":
        failures = run(argv[2], argv[3])
    else:
        print(__doc__)
        return 2
    for f in failures:
        print(f"FAIL: {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
