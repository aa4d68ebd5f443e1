"""The chart's platform objects (NetworkPolicies, autoscalers, the Ingress, the
ServiceAccount) checked against what the release renders: each refers to objects and ports
that exist, and the policies let the cluster's roles reach each other where they must.
Used by chart_test.py's cross and selftest checks."""

import functools
import os
import re

import yaml

PROMETHEUS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "deploy",
                              "prometheus")


@functools.lru_cache(maxsize=None)
def served_external_metrics():
    """External metric name -> the series it is served from, by prometheus-adapter with
    deploy/prometheus/adapter-rules.yaml; a series not recorded by pdserve-rules.yaml maps to
    None (the adapter would serve nothing)."""
    with open(os.path.join(PROMETHEUS_DIR, "adapter-rules.yaml")) as f:
        adapter = yaml.safe_load(f)
    with open(os.path.join(PROMETHEUS_DIR, "pdserve-rules.yaml")) as f:
        recorded = {r["record"] for g in yaml.safe_load(f)["groups"] for r in g["rules"]
                    if "record" in r}
    served = {}
    for rule in adapter.get("externalRules", []):
        series = re.match(r"\s*([a-zA-Z_:][a-zA-Z0-9_:]*)", rule["seriesQuery"]).group(1)
        served[rule["name"]["as"]] = series if series in recorded else None
    return served


def container_ports(template):
    names, numbers = set(), set()
    for c in template["spec"]["containers"]:
        for p in c.get("ports", []):
            numbers.add(p["containerPort"])
            if "name" in p:
                names.add(p["name"])
    return names, numbers


def port_exists(port, names, numbers):
    return port in names if isinstance(port, str) else port in numbers


def matches(label_selector, labels):
    """A LabelSelector (matchLabels and matchExpressions) against a label set; an empty
    selector matches everything, as in a NetworkPolicy."""
    for k, v in (label_selector or {}).get("matchLabels", {}).items():
        if labels.get(k) != v:
            return False
    for e in (label_selector or {}).get("matchExpressions", []):
        key, op, values = e["key"], e["operator"], e.get("values", [])
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and labels.get(key) in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def ingress_allowed(policies, source_labels, target, port_name):
    """Whether the release's NetworkPolicies let a pod with `source_labels` (same namespace)
    reach the pod template `target` on its port `port_name`."""
    labels = target["metadata"].get("labels", {})
    selecting = [p for p in policies if matches(p["spec"]["podSelector"], labels)]
    if not selecting:
        return True
    for policy in selecting:
        for rule in policy["spec"].get("ingress", []):
            ports = rule.get("ports")
            if ports and not any(p.get("port") == port_name for p in ports):
                continue
            peers = rule.get("from")
            if not peers or any("podSelector" in peer and "namespaceSelector" not in peer
                                and matches(peer["podSelector"], source_labels)
                                for peer in peers):
                return True
    return False


def platform_problems(objs, by_kind, workloads, release_namespace):
    """NetworkPolicies, autoscalers, the Ingress and the ServiceAccount: each refers to what
    the release renders, and the policies let the cluster talk to itself."""
    problems = []
    policies = list(by_kind.get("NetworkPolicy", {}).values())
    by_role = {}
    for _, t in workloads:
        by_role.setdefault(t["metadata"].get("labels", {}).get("pdserve.io/role"), []).append(t)
    for name, policy in by_kind.get("NetworkPolicy", {}).items():
        pods = [t for _, t in workloads
                if matches(policy["spec"]["podSelector"], t["metadata"].get("labels", {}))]
        if not pods:
            problems.append(f"NetworkPolicy/{name}: podSelector matches no pods of the release")
        for rule in policy["spec"].get("ingress", []):
            for p in rule.get("ports", []):
                for t in pods:
                    if not port_exists(p.get("port"), *container_ports(t)):
                        problems.append(f"NetworkPolicy/{name}: port {p.get('port')} is not a "
                                        "port of its pods")
    if policies:
        # Who must reach whom, whatever else the policies allow.
        needed = [("prefill", "router", "registry"), ("decode", "router", "registry"),
                  ("router", "decode", "grpc"), ("router", "prefill", "grpc"),
                  ("decode", "prefill", "grpc"), ("decode", "prefill", "ucx"),
                  ("prefill", "decode", "ucx")]
        for source, target, port in needed:
            for s in by_role.get(source, []):
                for t in by_role.get(target, []):
                    if not ingress_allowed(policies, s["metadata"]["labels"], t, port):
                        problems.append(f"NetworkPolicy: {source} pods cannot reach {target} "
                                        f"pods' {port} port")
    for name, hpa in by_kind.get("HorizontalPodAutoscaler", {}).items():
        ref = hpa["spec"]["scaleTargetRef"]
        target = by_kind.get(ref["kind"], {}).get(ref["name"])
        if target is None:
            problems.append(f"HorizontalPodAutoscaler/{name}: scaleTargetRef {ref['kind']}/"
                            f"{ref['name']} is not in the release")
        elif "replicas" in target["spec"]:
            problems.append(f"HorizontalPodAutoscaler/{name}: {ref['kind']}/{ref['name']} "
                            "sets replicas, which the autoscaler owns")
        if hpa["spec"]["maxReplicas"] < hpa["spec"].get("minReplicas", 1):
            problems.append(f"HorizontalPodAutoscaler/{name}: maxReplicas below minReplicas")
        for metric in hpa["spec"].get("metrics", []):
            if metric["type"] != "External":
                continue
            external = metric["external"]["metric"]
            served = served_external_metrics()
            if external["name"] not in served:
                problems.append(f"HorizontalPodAutoscaler/{name}: External metric "
                                f"{external['name']} is not served by "
                                "deploy/prometheus/adapter-rules.yaml")
            elif served[external["name"]] is None:
                problems.append(f"HorizontalPodAutoscaler/{name}: External metric "
                                f"{external['name']} comes from a series pdserve-rules.yaml "
                                "does not record")
            namespace = external.get("selector", {}).get("matchLabels", {}).get("namespace")
            if namespace != hpa["metadata"].get("namespace", release_namespace):
                problems.append(f"HorizontalPodAutoscaler/{name}: External metric selects "
                                f"namespace {namespace}, not its release's")
    services = by_kind.get("Service", {})
    for name, ingress in by_kind.get("Ingress", {}).items():
        for rule in ingress["spec"].get("rules", []):
            for path in rule.get("http", {}).get("paths", []):
                backend = path["backend"]["service"]
                service = services.get(backend["name"])
                if service is None:
                    problems.append(f"Ingress/{name}: backend Service {backend['name']} is not in "
                                    "the release")
                    continue
                port = backend["port"].get("name", backend["port"].get("number"))
                if not any(p.get("name") == port or p["port"] == port
                           for p in service["spec"]["ports"]):
                    problems.append(f"Ingress/{name}: Service {backend['name']} has no port "
                                    f"{port}")
    accounts = by_kind.get("ServiceAccount", {})
    for workload, t in workloads:
        account = t["spec"].get("serviceAccountName")
        where = f"{workload['kind']}/{workload['metadata']['name']}"
        if accounts and account not in accounts:
            problems.append(f"{where}: serviceAccountName {account} is not the release's "
                            "ServiceAccount")
        if t["spec"].get("automountServiceAccountToken") is not False:
            problems.append(f"{where}: mounts a ServiceAccount token pdserve never uses")
    return problems
