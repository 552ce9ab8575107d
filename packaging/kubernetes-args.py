"""Reads a container of a Kubernetes manifest for scripts/packaging-test.

    python3 packaging/kubernetes-args.py FILE CONTAINER ADDR

Checks what the manifest promises (two or more replicas, probes on /livez
and /readyz, a stop period that covers the preStop hook, --grace and the
release, a restricted security context), then prints, one per line:

    probe <path>          each probe's path (liveness, then readiness)
    stop <seconds>        terminationGracePeriodSeconds
    tmpfs <path>          each emptyDir the container mounts
    arg <value>           the container's args, to run against Azurite
    full <value>          the container's args, as Kubernetes passes them

Both have $(VAR) expanded from the container's env (a fieldRef gets the
name "<CONTAINER>-0"). The `arg` lines have more changes, so that they run
against a local Azurite within the test: --account-url URL and --auth KIND
are left out (the test gives a connection string in the environment
instead; the container that the URL names becomes --container), the
--metrics-addr value becomes ADDR, and a --cron expression becomes
`*/2 * * * * *`, a slot every two seconds.
"""

import re
import sys
from urllib.parse import urlparse

import yaml

# A release is one request, bounded by --request-timeout (default 3 s).
REQUEST_TIMEOUT = 3
MARGIN = 5


def fail(message):
    sys.exit(f"{sys.argv[1]}: {message}")


def seconds(text):
    match = re.fullmatch(r"(\d+)s", text)
    if not match:
        fail(f"--grace {text!r}: expected whole seconds such as 10s")
    return int(match.group(1))


def main():
    path, name, addr = sys.argv[1:4]
    with open(path, encoding="utf-8") as file:
        documents = [d for d in yaml.safe_load_all(file) if d]
    deployment = next(d for d in documents if d["kind"] == "Deployment")
    if deployment["spec"]["replicas"] < 2:
        fail("a singleton needs two replicas or more to fail over")
    pod = deployment["spec"]["template"]["spec"]
    if pod["securityContext"].get("runAsNonRoot") is not True:
        fail("the pod must run as non-root")
    containers = pod.get("initContainers", []) + pod["containers"]
    container = next(c for c in containers if c["name"] == name)
    security = container["securityContext"]
    if security.get("readOnlyRootFilesystem") is not True or security["capabilities"]["drop"] != ["ALL"]:
        fail(f"{name}: a read-only root and no capabilities expected")

    args = container["args"]
    grace = seconds(args[args.index("--grace") + 1])
    pre_stop = container.get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds", 0)
    stop = pod["terminationGracePeriodSeconds"]
    if stop < pre_stop + grace + REQUEST_TIMEOUT + MARGIN:
        fail(
            f"terminationGracePeriodSeconds {stop} < preStop {pre_stop} + --grace {grace} "
            f"+ release {REQUEST_TIMEOUT} + {MARGIN}: the kubelet could SIGKILL before the release"
        )
    probes = [container["livenessProbe"]["httpGet"]["path"], container["readinessProbe"]["httpGet"]["path"]]
    if probes[0] != "/livez" or not probes[1].startswith("/readyz"):
        fail(f"{name}: probes {probes}, expected /livez and /readyz")

    env = {}
    for variable in container.get("env", []):
        env[variable["name"]] = variable.get("value", f"{name}-0")
    expanded = [re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), a) for a in args]
    out, skip = [], False
    for index, arg in enumerate(expanded):
        if skip:
            skip = False
            continue
        if arg == "--":
            out.extend(expanded[index:])
            break
        if arg in ("--account-url", "--auth"):
            skip = True
            # A container's URL names the container: keep it.
            container_path = urlparse(expanded[index + 1]).path.strip("/")
            if arg == "--account-url" and container_path:
                out.extend(["--container", container_path])
            continue
        out.append(arg)
        if arg == "--metrics-addr":
            out.append(addr)
            skip = True
        if arg == "--cron":
            out.append("*/2 * * * * *")
            skip = True
    empty_dirs = {v["name"] for v in pod.get("volumes", []) if "emptyDir" in v}
    for mount in container.get("volumeMounts", []):
        if mount["name"] in empty_dirs:
            print(f"tmpfs {mount['mountPath']}")
    for probe in probes:
        print(f"probe {probe}")
    print(f"stop {stop}")
    for arg in out:
        print(f"arg {arg}")
    for arg in expanded:
        print(f"full {arg}")


main()
