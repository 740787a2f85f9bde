#!/usr/bin/python3
"""deploy/k8s/: the manifests are well-formed Kubernetes objects that fit together, and the commands their
pods run really produce a sweep (sweep.yaml, sweep-gather.yaml) and an experiment over host agents
(experiment.yaml).

Kubernetes itself is not needed: the check reads the manifests (python3-yaml), checks what the cluster would
rely on (an Indexed Job whose pods mount the spec ConfigMap and the results claim the manifests define, one
pod per node, a gather Job over the same volumes without privileges), and then runs each pod's container
command on this machine as the kubelet would: /spec and /results mapped to temporary directories, the image's
binary to the built one, and JOB_COMPLETION_INDEX set to each index in turn. Before the points run, the gather
Job must fail and list every point as missing; after, it must succeed and write sweep.csv; a pod of a point
that is complete must not run it again. For the experiment, the controller's pod and each agent pod run at
once (POD_IP = 127.0.0.1, /secret mapped too): the run must complete on as many hosts as the agents Job has
pods, each agent saying it is a Kubernetes pod, with the Secret's file as the run's secret. Where kubectl can
reach a cluster, `kubectl apply --dry-run=server` is run too.
Exit 0 when all hold, 1 with the failures, 77 (skip) without python3-yaml.

Usage: check_k8s_manifests.py CHAOSBED REPO
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

try:
    import yaml
except ImportError as e:
    print(f"SKIP: {e.name} is not installed (Debian: python3-yaml)")
    sys.exit(77)

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
    return cond


def load(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def pod_spec(job):
    return job["spec"]["template"]["spec"]


def container(job):
    cs = pod_spec(job)["containers"]
    check(len(cs) == 1, f"{job['metadata']['name']}: one container expected, found {len(cs)}")
    return cs[0]


def volumes_fit(job, claims, configmap):
    """Every volume mount names a volume of the pod; the volumes are the spec ConfigMap and a defined claim."""
    name = job["metadata"]["name"]
    volumes = {v["name"]: v for v in pod_spec(job).get("volumes", [])}
    mounts = {m["mountPath"]: m["name"] for m in container(job).get("volumeMounts", [])}
    check(set(mounts) == {"/spec", "/results"}, f"{name}: mounts {sorted(mounts)}, expected /spec and /results")
    for path, vol in mounts.items():
        if not check(vol in volumes, f"{name}: mount {path} names no volume '{vol}'"):
            continue
        v = volumes[vol]
        if path == "/spec":
            check(v.get("configMap", {}).get("name") == configmap, f"{name}: /spec is not the ConfigMap {configmap}")
        else:
            check(v.get("persistentVolumeClaim", {}).get("claimName") in claims,
                  f"{name}: /results is not a claim these manifests define ({sorted(claims)})")


def run_pod(job, chaosbed, root, env_extra, timeout):
    """The container's command as the kubelet would run it, with the image's paths mapped to this machine."""
    p = subprocess.run(pod_argv(job, chaosbed, root), env=dict(os.environ, **env_extra), cwd=root,
                       capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout + p.stderr


def pod_argv(job, chaosbed, root):
    c = container(job)
    argv = list(c.get("command", [])) + list(c.get("args", []))

    def local(s):
        s = s.replace("/chaosbed/build/chaosbed", chaosbed)
        return re.sub(r"(?<![\w/])/(spec|results|secret)(?=/|\s|$|\")", lambda m: f"{root}/{m.group(1)}", s)

    return [local(a) for a in argv]


def env_of(job):
    """The container's literal env values, and the downward-API fields it asks for."""
    values, fields = {}, {}
    for e in container(job).get("env", []):
        if "value" in e:
            values[e["name"]] = e["value"]
        else:
            fields[e["name"]] = e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
    return values, fields


def check_experiment(k8s, chaosbed, repo):
    """experiment.yaml: a controller Job and an agents Job over one results claim and one Secret, run here."""
    docs = load(os.path.join(k8s, "experiment.yaml"))
    for d in docs:
        check({"apiVersion", "kind", "metadata"} <= set(d), f"{d.get('kind')}: apiVersion, kind and metadata needed")
    claims = {d["metadata"]["name"] for d in docs if d["kind"] == "PersistentVolumeClaim"}
    jobs = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Job"}
    if not check(set(jobs) == {"chaosbed-controller", "chaosbed-agents"}, f"experiment.yaml: jobs {sorted(jobs)}"):
        return
    controller, agents = jobs["chaosbed-controller"], jobs["chaosbed-agents"]
    n = agents["spec"].get("completions")
    check(n == agents["spec"].get("parallelism"), "every agent pod runs at once (parallelism = completions)")
    values, fields = env_of(controller)
    check(values.get("AGENTS") == str(n), f"the controller waits for AGENTS={values.get('AGENTS')}, the agents Job has {n} pods")
    check(fields.get("POD_IP") == "status.podIP", "the controller listens on its pod's address (POD_IP from status.podIP)")
    check("listen: $POD_IP" in " ".join(container(controller)["args"]), "the controller's store listens on $POD_IP")
    anti = pod_spec(agents).get("affinity", {}).get("podAntiAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution", [])
    labels = agents["spec"]["template"]["metadata"].get("labels", {})
    check(any(t.get("topologyKey") == "kubernetes.io/hostname" and
              all(labels.get(k) == v for k, v in t.get("labelSelector", {}).get("matchLabels", {}).items())
              for t in anti), "one agent per node (required anti-affinity on their own labels)")
    sc = container(controller).get("securityContext", {})
    check(not sc.get("privileged", False) and "ALL" in sc.get("capabilities", {}).get("drop", []),
          "the controller needs no privileges and no capabilities")
    for job in (controller, agents):
        name = job["metadata"]["name"]
        check(pod_spec(job).get("restartPolicy") == "Never", f"{name}: restartPolicy Never")
        volumes = {v["name"]: v for v in pod_spec(job).get("volumes", [])}
        mounts = {m["mountPath"]: m for m in container(job).get("volumeMounts", [])}
        results = mounts.get("/results")
        check(results is not None and volumes.get(results["name"], {}).get("persistentVolumeClaim", {}).get("claimName") in claims,
              f"{name}: /results is not a claim experiment.yaml defines")
        secret = mounts.get("/secret/run.secret")
        check(secret is not None and secret.get("subPath") == "run.secret" and
              volumes.get(secret["name"], {}).get("secret", {}).get("secretName") == "chaosbed-run-secret",
              f"{name}: the run's Secret must be mounted as a plain file (subPath) at /secret/run.secret")
    if failures:
        return

    root = tempfile.mkdtemp(prefix="chaosbed-k8s-experiment-")
    try:
        for d in ("spec", "results", "secret"):
            os.makedirs(f"{root}/{d}")
        with open(os.path.join(repo, "experiments/scenarios/tiny-synthetic.yaml")) as f:
            spec = f.read()
        with open(f"{root}/spec/experiment.yaml", "w") as f:
            f.write(spec)
        fd = os.open(f"{root}/secret/run.secret", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
        os.write(fd, os.urandom(32).hex().encode())
        os.close(fd)
        env = dict(os.environ, **values, POD_IP="127.0.0.1")
        ctl = subprocess.Popen(pod_argv(controller, chaosbed, root), env=env, cwd=root, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
        pods = [subprocess.Popen(pod_argv(agents, chaosbed, root), cwd=root, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True,
                                 env=dict(os.environ, KUBERNETES_SERVICE_HOST="10.96.0.1",
                                          HOSTNAME=f"chaosbed-agents-{i}"))
                for i in range(n)]
        out, _ = ctl.communicate(timeout=240)
        check(ctl.returncode == 0, f"controller pod: exit {ctl.returncode}:\n{out[-3000:]}")
        for i, p in enumerate(pods):
            try:
                pout, _ = p.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                pout, _ = p.communicate()
            check(p.returncode == 0, f"agent pod {i}: exit {p.returncode}:\n{pout[-2000:]}")
        summary_path = f"{root}/results/run/summary.json"
        if check(os.path.exists(summary_path), "the controller pod wrote no summary.json"):
            with open(summary_path) as f:
                summary = json.load(f)
            check(summary.get("complete") is True, "the experiment did not complete")
            launched = sorted(h.get("launched_by", "") for h in summary.get("hosts") or [])
            check(launched == sorted(f"kubernetes pod chaosbed-agents-{i}" for i in range(n)),
                  f"the hosts are not the {n} agent pods: {launched}")
            print(f"experiment.yaml: ran on {len(launched)} hosts: {', '.join(launched)}")
            for label, s in summary.get("strategies", {}).items():
                check(s.get("reached_target") is True, f"{label} did not reach its target")
        check(not os.path.exists(f"{root}/results/run/.secret"), "the run made a secret of its own beside the Secret's")
    finally:
        if not failures:
            shutil.rmtree(root, ignore_errors=True)
        else:
            print(f"kept {root}")


def main():
    chaosbed, repo = os.path.abspath(sys.argv[1]), sys.argv[2]
    k8s = os.path.join(repo, "deploy/k8s")
    sweep_docs = load(os.path.join(k8s, "sweep.yaml"))
    gather_docs = load(os.path.join(k8s, "sweep-gather.yaml"))
    for d in sweep_docs + gather_docs:
        check({"apiVersion", "kind", "metadata"} <= set(d), f"{d.get('kind')}: apiVersion, kind and metadata needed")

    claims = {d["metadata"]["name"] for d in sweep_docs if d["kind"] == "PersistentVolumeClaim"}
    jobs = [d for d in sweep_docs if d["kind"] == "Job"]
    gathers = [d for d in gather_docs if d["kind"] == "Job"]
    if not (check(len(jobs) == 1, "sweep.yaml: one Job expected") and check(len(gathers) == 1, "sweep-gather.yaml: one Job expected")):
        return
    job, gather = jobs[0], gathers[0]
    check(job["apiVersion"] == "batch/v1" and job["spec"].get("completionMode") == "Indexed",
          "the sweep Job must be a batch/v1 Indexed Job (pod i runs point i)")
    check(pod_spec(job).get("restartPolicy") in ("Never", "OnFailure"), "a Job's pods need restartPolicy Never or OnFailure")
    check(pod_spec(gather).get("restartPolicy") in ("Never", "OnFailure"), "the gather Job needs restartPolicy Never or OnFailure")
    check("JOB_COMPLETION_INDEX" in " ".join(container(job).get("args", [])), "the sweep pods must run the point of their index")
    anti = pod_spec(job).get("affinity", {}).get("podAntiAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution", [])
    labels = job["spec"]["template"]["metadata"].get("labels", {})
    check(any(t.get("topologyKey") == "kubernetes.io/hostname" and
              all(labels.get(k) == v for k, v in t.get("labelSelector", {}).get("matchLabels", {}).items())
              for t in anti), "the sweep pods must keep to one per node (required anti-affinity on their own labels)")
    check(not container(gather).get("securityContext", {}).get("privileged", False), "the gather Job needs no privileges")
    for j in (job, gather):
        volumes_fit(j, claims, "chaosbed-spec")

    # The pods' commands, for real: a two-point sweep of the tiny scenario.
    root = tempfile.mkdtemp(prefix="chaosbed-k8s-")
    try:
        os.makedirs(f"{root}/spec")
        os.makedirs(f"{root}/results")
        with open(os.path.join(repo, "experiments/scenarios/tiny-synthetic.yaml")) as f:
            spec = f.read()
        with open(f"{root}/spec/sweep.yaml", "w") as f:
            f.write(spec + "\nsweep:\n  grid:\n    chaos.faults[0].duration_s: [1]\n  seeds: [7]\n")
        code, out = run_pod(gather, chaosbed, root, {}, 120)
        missing = re.findall(r"run it with --sweep_point_index (\d+)", out)
        check(code == 4, f"gather before any point ran: exit {code}, expected 4:\n{out}")
        if not check(missing == ["0", "1"], f"gather before any point ran must list points 0 and 1 as missing:\n{out}"):
            return
        for index in missing:
            code, out = run_pod(job, chaosbed, root, {"JOB_COMPLETION_INDEX": index}, 240)
            check(code == 0 and "complete" in out, f"pod of index {index}: exit {code}:\n{out[-3000:]}")
        # A re-applied Job's pod of a complete point leaves its result alone.
        code, out = run_pod(job, chaosbed, root, {"JOB_COMPLETION_INDEX": "0"}, 60)
        check(code == 0 and "complete, not rerun" in out, f"pod of a complete point: exit {code}, expected no rerun:\n{out}")
        code, out = run_pod(gather, chaosbed, root, {}, 120)
        check(code == 0 and "2 point(s): 2 complete, 0 not complete" in out, f"gather after the points: exit {code}:\n{out}")
        check(os.path.exists(f"{root}/results/sweep/sweep.csv"), "the gather Job wrote no sweep.csv")
    finally:
        if not failures:
            shutil.rmtree(root, ignore_errors=True)
        else:
            print(f"kept {root}")

    check_experiment(k8s, chaosbed, repo)

    # Where a cluster is reachable, it checks the objects against its own API too.
    kubectl = shutil.which("kubectl")
    if kubectl and subprocess.run([kubectl, "version", "--request-timeout=5s"], capture_output=True).returncode == 0:
        for f in ("sweep.yaml", "sweep-gather.yaml", "experiment.yaml"):
            p = subprocess.run([kubectl, "apply", "--dry-run=server", "-f", os.path.join(k8s, f)], capture_output=True, text=True)
            check(p.returncode == 0, f"kubectl apply --dry-run=server -f {f}: {p.stderr}")
    else:
        print("note: no Kubernetes cluster reachable; the server-side dry run was not done")


if __name__ == "__main__":
    main()
    for f in failures:
        print("FAIL:", f)
    print("k8s manifests:", "FAILED" if failures else "ok")
    sys.exit(1 if failures else 0)
