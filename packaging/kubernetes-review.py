"""What a production review asks of deploy/kubernetes, for scripts/packaging-test.

    python3 packaging/kubernetes-review.py VERSION

Each set of manifests applied together (kustomization.yaml's resources;
schedule.yaml on its own) is read, and each Deployment in it must have:

- a PodDisruptionBudget in the set that selects its pods and keeps one;
- a NetworkPolicy in the set that selects its pods and lets connections to
  the probes port in from named peers only;
- its replicas spread over nodes with `DoNotSchedule` (`ScheduleAnyway`
  lets both share a node, which then takes both down);
- Prometheus' scrape annotations naming the probes port and /metrics (the
  README says the pods carry them);
- a writable /tmp (an emptyDir) in each container that runs a command
  under a read-only root, and a comment saying so.

sidecar.yaml is held to the annotations only: its application's own
ports, its budget and its spread are for its owner to choose. Every
`localhost/blob-mutex:TAG` the manifests name must be VERSION, the tag
scripts/image gives the image. Prints each problem and exits 1 if there
is one.
"""

import glob
import os
import re
import sys

import yaml

ROOT = "deploy/kubernetes"


def load(name):
    with open(f"{ROOT}/{name}", encoding="utf-8") as file:
        return [d for d in yaml.safe_load_all(file) if d]


def selects(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def review(set_name, documents, text, annotations_only=False):
    problems = []
    for deployment in (d for d in documents if d["kind"] == "Deployment"):
        name = f"{set_name}: Deployment {deployment['metadata']['name']}"
        template = deployment["spec"]["template"]
        labels = template["metadata"]["labels"]
        pod = template["spec"]
        containers = pod.get("initContainers", []) + pod["containers"]
        ports = {p["name"]: p["containerPort"] for c in containers for p in c.get("ports", []) if "name" in p}
        probes = ports.get("probes")

        annotations = template["metadata"].get("annotations", {})
        wanted = {"prometheus.io/scrape": "true", "prometheus.io/port": str(probes), "prometheus.io/path": "/metrics"}
        wrong = {k: annotations.get(k) for k, v in wanted.items() if annotations.get(k) != v}
        if wrong:
            problems.append(f"{name}: scrape annotations {wrong}, expected {wanted}")
        if annotations_only:
            continue

        budgets = [d for d in documents if d["kind"] == "PodDisruptionBudget" and selects(d["spec"]["selector"], labels)]
        if not budgets:
            problems.append(f"{name}: no PodDisruptionBudget selects its pods")
        elif not any(b["spec"].get("minAvailable") == 1 or b["spec"].get("maxUnavailable") == 1 for b in budgets):
            problems.append(f"{name}: its PodDisruptionBudget lets more than one replica go at a time")

        policies = [
            d for d in documents
            if d["kind"] == "NetworkPolicy" and selects(d["spec"]["podSelector"], labels)
            and "Ingress" in d["spec"].get("policyTypes", [])
        ]
        if not policies:
            problems.append(f"{name}: no NetworkPolicy selects its pods: port {probes} is open cluster-wide")
        for policy in policies:
            for rule in policy["spec"].get("ingress", []):
                if not rule.get("from"):
                    problems.append(f"{name}: NetworkPolicy {policy['metadata']['name']} lets in any peer")

        spread = [
            c for c in pod.get("topologySpreadConstraints", [])
            if c["topologyKey"] == "kubernetes.io/hostname" and selects(c["labelSelector"], labels)
        ]
        if not spread or any(c["whenUnsatisfiable"] != "DoNotSchedule" for c in spread):
            problems.append(f"{name}: its replicas may share a node (no hostname spread with DoNotSchedule)")

        empty_dirs = {v["name"] for v in pod.get("volumes", []) if "emptyDir" in v}
        for container in containers:
            read_only = container.get("securityContext", {}).get("readOnlyRootFilesystem")
            if not read_only or "--" not in container.get("args", []):
                continue
            mounts = [m for m in container.get("volumeMounts", []) if m["mountPath"] == "/tmp"]
            if not any(m["name"] in empty_dirs for m in mounts):
                problems.append(f"{name}: container {container['name']} runs a command under a read-only root with no writable /tmp")
        if empty_dirs and not re.search(r"#.*/tmp", text):
            problems.append(f"{name}: no comment says what its /tmp is for")
    return problems


def main():
    version = sys.argv[1]
    files = sorted(os.path.basename(p) for p in glob.glob(f"{ROOT}/*.yaml"))
    kustomized = yaml.safe_load(open(f"{ROOT}/kustomization.yaml", encoding="utf-8"))["resources"]
    sets = {"kustomization.yaml": kustomized, "schedule.yaml": ["schedule.yaml"]}
    problems = []
    for set_name, names in sets.items():
        documents = [d for n in names for d in load(n)]
        text = "\n".join(open(f"{ROOT}/{n}", encoding="utf-8").read() for n in names)
        problems += review(set_name, documents, text)
    problems += review("sidecar.yaml", load("sidecar.yaml"), "", annotations_only=True)
    for name in files + ["README.md"]:
        for tag in re.findall(r"localhost/blob-mutex:([\w.+-]+)", open(f"{ROOT}/{name}", encoding="utf-8").read()):
            if tag not in (version, "VERSION"):
                problems.append(f"{name}: localhost/blob-mutex:{tag}, but scripts/image tags {version}")
    for problem in problems:
        print(f"   {problem}", file=sys.stderr)
    sys.exit(1 if problems else 0)


main()
