#!/usr/bin/env python3
"""Checks of the Helm chart deploy/helm/pdserve without a cluster (CTest label "deploy").

Subcommands (each a CTest test):
  lint      helm lint --strict, with the defaults and with every scenario's values.
  golden    helm template per scenario == tests/deploy/helm/golden/<scenario>.yaml
            (--update rewrites the goldens after an intended change; review the diff).
  types     every rendered object, as a typed TypeScript constant, passes tsc --strict against
            the Kubernetes and Prometheus-operator API types (unknown fields, wrong types and
            missing required fields fail; validate() alone lets unknown fields through).
  cross     cross-object checks that lint and schemas miss (see cross_object_problems), and
            the embedded rules and dashboards equal their sources in deploy/.
  negative  bad values fail with a message naming the problem.
  flags     every flag in rendered container args is one the binary's --help lists.
  selftest  each cross-object check fires on a manifest with the defect it looks for.
"""

import argparse
import copy
import functools
import json
import os
import re
import subprocess
import sys
import tempfile

import yaml
from chart_platform import container_ports, platform_problems, port_exists
from typescript_check import typecheck

SCRIPT_DIR = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.path.abspath(os.path.join(SCRIPT_DIR, "..", ".."))
CHART = os.path.join(SOURCE_DIR, "deploy", "helm", "pdserve")
SCENARIOS = os.path.join(SCRIPT_DIR, "helm", "scenarios")
GOLDEN = os.path.join(SCRIPT_DIR, "helm", "golden")
RELEASE = "pd"
NAMESPACE = "serving"

# kind -> (TypeScript module under node_modules, interface name).
TS_TYPES = {
    ("apps/v1", "Deployment"): ("kubernetes-models/apps/v1/Deployment", "IDeployment"),
    ("apps/v1", "StatefulSet"): ("kubernetes-models/apps/v1/StatefulSet", "IStatefulSet"),
    ("v1", "Service"): ("kubernetes-models/v1/Service", "IService"),
    ("v1", "ConfigMap"): ("kubernetes-models/v1/ConfigMap", "IConfigMap"),
    ("v1", "ServiceAccount"): ("kubernetes-models/v1/ServiceAccount", "IServiceAccount"),
    ("networking.k8s.io/v1", "NetworkPolicy"):
        ("kubernetes-models/networking.k8s.io/v1/NetworkPolicy", "INetworkPolicy"),
    ("networking.k8s.io/v1", "Ingress"):
        ("kubernetes-models/networking.k8s.io/v1/Ingress", "IIngress"),
    ("autoscaling/v2", "HorizontalPodAutoscaler"):
        ("kubernetes-models/autoscaling/v2/HorizontalPodAutoscaler", "IHorizontalPodAutoscaler"),
    ("policy/v1", "PodDisruptionBudget"):
        ("kubernetes-models/policy/v1/PodDisruptionBudget", "IPodDisruptionBudget"),
    ("monitoring.coreos.com/v1", "PodMonitor"):
        ("@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PodMonitor",
         "IPodMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"):
        ("@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PrometheusRule",
         "IPrometheusRule"),
}
STANDARD_RESOURCES = {"cpu", "memory", "ephemeral-storage"}
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def scenarios():
    return sorted(f[:-5] for f in os.listdir(SCENARIOS) if f.endswith(".yaml"))


def helm(args, tools, extra_args=(), check=True):
    env = dict(os.environ, HOME=os.path.join(tools, "home"))
    proc = subprocess.run([os.path.join(tools, "helm", "helm")] + list(args) + list(extra_args),
                          capture_output=True, text=True, env=env)
    if check and proc.returncode != 0:
        sys.exit(f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


def render(tools, scenario=None, values=None, sets=(), check=True):
    args = ["template", RELEASE, CHART, "--namespace", NAMESPACE]
    if scenario:
        args += ["-f", os.path.join(SCENARIOS, scenario + ".yaml")]
    if values is not None:
        handle = tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False)
        yaml.safe_dump(values, handle)
        handle.close()
        args += ["-f", handle.name]
    for s in sets:
        args += ["--set", s]
    return helm(args, tools, check=check)


def objects(manifest_text):
    return [d for d in yaml.safe_load_all(manifest_text) if d]


def pod_specs(objs):
    """(workload, pod template) of every Deployment and StatefulSet."""
    return [(o, o["spec"]["template"]) for o in objs
            if o["kind"] in ("Deployment", "StatefulSet")]


def selects(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def flag_value(args, name):
    """The value a binary sees for --name: the last one given, as Abseil's flags take."""
    value = None
    for a in args:
        if a.startswith(f"--{name}="):
            value = a.split("=", 1)[1]
    return value


def seconds(duration):
    m = re.fullmatch(r"(\d+)(s|m)", duration or "")
    if not m:
        return None
    return int(m.group(1)) * (60 if m.group(2) == "m" else 1)


def cross_object_problems(objs):
    """Defects a schema cannot see: references between objects and Kubernetes rules."""
    problems = []
    seen = set()
    workloads = pod_specs(objs)
    by_kind = {}
    for o in objs:
        by_kind.setdefault(o["kind"], {})[o["metadata"]["name"]] = o
    for o in objs:
        kind, name = o["kind"], o["metadata"]["name"]
        where = f"{kind}/{name}"
        if (kind, name) in seen:
            problems.append(f"{where}: duplicate kind/name")
        # An empty `annotations:` or `labels:` renders as null, which tools that merge
        # metadata (kubectl apply, Argo CD, kustomize) trip over.
        metadatas = [("metadata", o["metadata"])]
        if kind in ("Deployment", "StatefulSet"):
            metadatas.append(("spec.template.metadata", o["spec"]["template"].get("metadata", {})))
        for path, metadata in metadatas:
            for key in ("annotations", "labels"):
                if key in metadata and metadata[key] is None:
                    problems.append(f"{where}: {path}.{key} is null")
        seen.add((kind, name))
        if not DNS1123_LABEL.match(name) or len(name) > 63:
            problems.append(f"{where}: name is not a DNS-1123 label of at most 63 characters")
        labels = o["metadata"].get("labels", {})
        for key in ("app.kubernetes.io/name", "app.kubernetes.io/instance"):
            if key not in labels and kind != "ConfigMap":
                problems.append(f"{where}: no {key} label")

    for workload, template in workloads:
        where = f"{workload['kind']}/{workload['metadata']['name']}"
        pod_labels = template["metadata"].get("labels", {})
        if not selects(workload["spec"]["selector"]["matchLabels"], pod_labels):
            problems.append(f"{where}: selector does not match its pod template's labels")
        if "pdserve.io/role" not in pod_labels:
            problems.append(f"{where}: pods have no pdserve.io/role label")
        if workload["kind"] == "StatefulSet":
            # The controller-revision-hash label is <name>-<10 characters>, at most 63.
            if len(workload["metadata"]["name"]) > 52:
                problems.append(f"{where}: StatefulSet name longer than 52 characters")
            service = by_kind.get("Service", {}).get(workload["spec"].get("serviceName"))
            if service is None:
                problems.append(f"{where}: serviceName names no Service of the release")
            elif service["spec"].get("clusterIP") != "None":
                problems.append(f"{where}: serviceName's Service is not headless")
        names, numbers = container_ports(template)
        volumes = {v["name"] for v in template["spec"].get("volumes", [])}
        for v in template["spec"].get("volumes", []):
            cm = v.get("configMap")
            if cm and cm["name"] not in by_kind.get("ConfigMap", {}):
                problems.append(f"{where}: volume {v['name']} names ConfigMap {cm['name']}, "
                                "which the release does not create")
        grace = template["spec"].get("terminationGracePeriodSeconds", 30)
        for c in template["spec"].get("initContainers", []) + template["spec"]["containers"]:
            cwhere = f"{where} container {c['name']}"
            for m in c.get("volumeMounts", []):
                if m["name"] not in volumes:
                    problems.append(f"{cwhere}: mounts undefined volume {m['name']}")
            for probe_kind in ("startupProbe", "readinessProbe", "livenessProbe"):
                probe = c.get(probe_kind)
                if not probe:
                    continue
                for handler in ("grpc", "httpGet", "tcpSocket"):
                    if handler in probe and not port_exists(probe[handler]["port"], names,
                                                             numbers):
                        problems.append(f"{cwhere}: {probe_kind} port "
                                        f"{probe[handler]['port']} is not a container port")
            resources = c.get("resources", {})
            requests, limits = resources.get("requests", {}), resources.get("limits", {})
            extended = {r for r in set(requests) | set(limits)
                        if r not in STANDARD_RESOURCES and not r.startswith("hugepages-")}
            for r in sorted(extended):
                if str(requests.get(r)) != str(limits.get(r)):
                    problems.append(f"{cwhere}: extended resource {r} needs requests == limits "
                                    f"(requests {requests.get(r)}, limits {limits.get(r)})")
            if any("rdma" in r for r in extended):
                added = c.get("securityContext", {}).get("capabilities", {}).get("add", [])
                if "IPC_LOCK" not in added:
                    problems.append(f"{cwhere}: RDMA without the IPC_LOCK capability")
            drain = seconds(flag_value(c.get("args", []), "drain_timeout"))
            if drain is not None and grace <= drain:
                problems.append(f"{cwhere}: terminationGracePeriodSeconds {grace} is not above "
                                f"--drain_timeout ({drain} s)")

    def matching_pods(selector):
        return [t for _, t in workloads if selects(selector, t["metadata"].get("labels", {}))]

    for name, service in by_kind.get("Service", {}).items():
        pods = matching_pods(service["spec"].get("selector", {}))
        if not pods:
            problems.append(f"Service/{name}: selector matches no pods of the release")
        for p in service["spec"].get("ports", []):
            target = p.get("targetPort", p["port"])
            for t in pods:
                if not port_exists(target, *container_ports(t)):
                    problems.append(f"Service/{name}: targetPort {target} is not a port of "
                                    "its pods")
    for name, monitor in by_kind.get("PodMonitor", {}).items():
        pods = matching_pods(monitor["spec"]["selector"].get("matchLabels", {}))
        if not pods:
            problems.append(f"PodMonitor/{name}: selector matches no pods of the release")
        for endpoint in monitor["spec"].get("podMetricsEndpoints", []):
            for t in pods:
                if not port_exists(endpoint.get("port"), *container_ports(t)):
                    problems.append(f"PodMonitor/{name}: port {endpoint.get('port')} is not a "
                                    "port of its pods")
    for name, pdb in by_kind.get("PodDisruptionBudget", {}).items():
        if not matching_pods(pdb["spec"]["selector"].get("matchLabels", {})):
            problems.append(f"PodDisruptionBudget/{name}: selector matches no pods")
    problems += platform_problems(objs, by_kind, workloads, NAMESPACE)
    return problems


def cmd_lint(a):
    failed = False
    for scenario in [None] + scenarios():
        args = ["lint", "--strict", CHART]
        if scenario:
            args += ["-f", os.path.join(SCENARIOS, scenario + ".yaml")]
        proc = helm(args, a.tools, check=False)
        print(f"lint {scenario or 'defaults'}: exit {proc.returncode}")
        if proc.returncode != 0:
            print(proc.stdout + proc.stderr)
            failed = True
    return 1 if failed else 0


def sha256(text):
    import hashlib
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def golden_text(rendered):
    """The render, with the embedded dashboards and rules (checked against their sources in
    deploy/ by `cross`, and by their own tests) cut to digests, so that goldens show the
    chart's own structure."""
    out = []
    for doc in re.split(r"^---\n", rendered, flags=re.M):
        o = yaml.safe_load(doc) if doc.strip() else None
        if isinstance(o, dict) and o.get("kind") == "PrometheusRule":
            o["spec"]["groups"] = [f"{g['name']}: {len(g['rules'])} rules, sha256 "
                                   f"{sha256(json.dumps(g, sort_keys=True))}"
                                   for g in o["spec"]["groups"]]
            doc = "# (groups summarized by chart_test.py)\n" + yaml.safe_dump(o, sort_keys=False)
        elif isinstance(o, dict) and o.get("kind") == "ConfigMap" and \
                o["metadata"]["name"].endswith("-dashboards"):
            o["data"] = {k: f"{len(v)} bytes, sha256 {sha256(v)}" for k, v in o["data"].items()}
            doc = "# (data summarized by chart_test.py)\n" + yaml.safe_dump(o, sort_keys=False)
        out.append(doc)
    return "---\n".join(out)


BUCKET_SELECTOR = re.compile(r'le=~?"[^"]*"')


def mask_buckets(value):
    """`value` with every bucket selector in its strings replaced by le=X."""
    if isinstance(value, str):
        return BUCKET_SELECTOR.sub("le=X", value)
    if isinstance(value, list):
        return [mask_buckets(v) for v in value]
    if isinstance(value, dict):
        return {k: mask_buckets(v) for k, v in value.items()}
    return value


def objective_seconds(duration):
    m = re.fullmatch(r"([0-9.]+)(ms|s)", duration)
    return float(m.group(1)) / (1000 if m.group(2) == "ms" else 1)


def bucket_bound(selector):
    """The bound a rule's bucket selector picks: le="0.2" -> 0.2, le=~"2|2\\.0" -> 2."""
    return float(re.match(r'le=~?"([0-9.]+)', selector).group(1))


def embedded_copy_problems(objs):
    """The chart ships deploy/prometheus's rules (with the router's objectives in their bucket
    selectors) and deploy/grafana's dashboards unchanged."""
    problems = []
    router_args = next((c.get("args", []) for o in objs if o["kind"] == "Deployment"
                        and o["metadata"]["name"].endswith("-router")
                        for c in o["spec"]["template"]["spec"]["containers"]), [])
    for o in objs:
        if o["kind"] == "PrometheusRule":
            with open(os.path.join(SOURCE_DIR, "deploy", "prometheus", "pdserve-rules.yaml")) as f:
                source = yaml.safe_load(f)["groups"]
            masked = [mask_buckets(g) for g in (o["spec"]["groups"], source)]
            if masked[0] != masked[1]:
                problems.append(f"PrometheusRule/{o['metadata']['name']}: groups differ "
                                "from deploy/prometheus/pdserve-rules.yaml")
            # Attainment and burn rates count the bucket at the router's own objectives.
            exprs = [r["expr"] for g in o["spec"]["groups"] for r in g["rules"]]
            for metric, flag in (("time_to_first_token", "slo_ttft"),
                                 ("inter_token_latency", "slo_tpot")):
                wanted = objective_seconds(flag_value(router_args, flag))
                selectors = [sel for expr in exprs
                             for sel in re.findall(rf"{metric}_seconds_bucket\{{([^}}]*)\}}", expr)]
                if not selectors:
                    problems.append(f"PrometheusRule/{o['metadata']['name']}: no {metric} "
                                    "bucket selector (the objective check found nothing)")
                for selector in selectors:
                    bound = bucket_bound(selector)
                    if abs(bound - wanted) > 1e-12:
                        problems.append(f"PrometheusRule/{o['metadata']['name']}: {metric} "
                                        f"bucket {bound} is not --{flag} ({wanted} s)")
        if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-dashboards"):
            for path in sorted(os.listdir(os.path.join(SOURCE_DIR, "deploy", "grafana"))):
                if not path.endswith(".json"):
                    continue
                with open(os.path.join(SOURCE_DIR, "deploy", "grafana", path)) as f:
                    if o.get("data", {}).get(path) != f.read():
                        problems.append(f"ConfigMap/{o['metadata']['name']}: {path} missing "
                                        "or different from deploy/grafana")
        if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-emulated-profile"):
            with open(os.path.join(SOURCE_DIR, "deploy", "profiles", "h100-llama3-8b.json")) as f:
                if json.loads(o["data"]["profile.json"]) != json.load(f):
                    problems.append(f"ConfigMap/{o['metadata']['name']}: profile.json differs "
                                    "from deploy/profiles/h100-llama3-8b.json")
    return problems + emulated_problems(objs)


def emulated_problems(objs):
    """With an emulated-profile ConfigMap (emulated.enabled), every worker runs the emulated
    backend on that profile, sizes no KV pool by flag, and requests no GPU; the generated model
    has no weights. Without one, no worker is emulated."""
    problems = []
    emulated = any(o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-emulated-profile")
                   for o in objs)
    for workload, template in pod_specs(objs):
        role = template["metadata"].get("labels", {}).get("pdserve.io/role")
        if role not in ("prefill", "decode"):
            continue
        where = f"{workload['kind']}/{workload['metadata']['name']}"
        for c in template["spec"]["containers"]:
            args = c.get("args", [])
            is_emulated = "--backend=emulated" in args
            if is_emulated != emulated:
                problems.append(f"{where}: --backend=emulated {'missing' if emulated else 'set'}")
            if not emulated:
                continue
            profile = flag_value(args, "profile")
            mounted = [m["mountPath"] for m in c.get("volumeMounts", [])
                       if m["name"] == "emulated-profile"]
            if not profile or not any(profile.startswith(m + "/") for m in mounted):
                problems.append(f"{where}: --profile {profile} is not in the mounted profile")
            if flag_value(args, "kv_cache_bytes") is not None:
                problems.append(f"{where}: --kv_cache_bytes with an emulated pool (the profile's)")
            resources = c.get("resources", {})
            gpus = [r for part in ("requests", "limits") for r in resources.get(part, {})
                    if "gpu" in r]
            if gpus:
                problems.append(f"{where}: emulated workers request {sorted(set(gpus))}")
        for init in template["spec"].get("initContainers", []):
            if emulated and init["name"] == "make-model" and "--weights=false" not in init["args"]:
                problems.append(f"{where}: the generated model has weights nobody reads")
    return problems


def cmd_golden(a):
    failed = False
    for scenario in scenarios():
        rendered = golden_text(render(a.tools, scenario).stdout)
        path = os.path.join(GOLDEN, scenario + ".yaml")
        if a.update:
            with open(path, "w") as f:
                f.write(rendered)
            print(f"golden {scenario}: written")
            continue
        with open(path) as f:
            expected = f.read()
        if rendered != expected:
            failed = True
            diff = subprocess.run(["diff", "-u", path, "-"], input=rendered,
                                  capture_output=True, text=True).stdout
            print(f"golden {scenario}: differs (intended? run chart_test.py golden --update "
                  f"and review the diff)\n{diff}")
        else:
            print(f"golden {scenario}: equal")
    return 1 if failed else 0


def typescript_problems(tools, named_objects):
    """tsc --strict over [(label, object)] typed by TS_TYPES; returns (exit code, output)."""
    lines, imports = [], {}
    for i, (label, o) in enumerate(named_objects):
        module, interface = TS_TYPES[(o["apiVersion"], o["kind"])]
        imports[interface] = module
        ident = re.sub(r"[^A-Za-z0-9_]", "_", f"o{i}_{label}_{o['kind']}")
        lines.append(f"// {label}: {o['kind']}/{o['metadata']['name']}\n"
                     f"export const {ident}: {interface} = {json.dumps(o, indent=1)};")
    source = "".join(f'import type {{ {name} }} from "{module}";\n'
                     for name, module in sorted(imports.items()))
    source += "\n".join(lines) + "\n"
    return typecheck(tools, source, "manifests.ts")


def cmd_types(a):
    named = []
    for scenario in scenarios():
        for o in objects(render(a.tools, scenario).stdout):
            if (o["apiVersion"], o["kind"]) in TS_TYPES:
                named.append((scenario, o))
            else:
                print(f"{scenario}: {o['kind']}/{o['metadata']['name']} is of a kind the chart "
                      "does not create; not type-checked")
    code, output = typescript_problems(a.tools, named)
    print(f"types: {len(named)} objects over {len(scenarios())} scenarios, tsc exit {code}")
    if code != 0:
        print(output)
        return 1
    # The check can fail: a misspelt field in a Deployment must be reported.
    planted = copy.deepcopy(next(o for _, o in named if o["kind"] == "Deployment"))
    container = planted["spec"]["template"]["spec"]["containers"][0]
    container["readinesProbe"] = container.pop("readinessProbe")
    code, output = typescript_problems(a.tools, [("planted", planted)])
    caught = code != 0 and "readinesProbe" in output
    print(f"types: a planted 'readinesProbe' is {'reported' if caught else 'MISSED'}")
    return 0 if caught else 1


def cmd_cross(a):
    failed = False
    for scenario in scenarios():
        objs = objects(render(a.tools, scenario).stdout)
        problems = cross_object_problems(objs) + embedded_copy_problems(objs)
        print(f"cross {scenario}: {len(problems)} problems")
        for p in problems:
            print("  " + p)
        failed |= bool(problems)
    return 1 if failed else 0


# (values set with --set, the message helm must print).
NEGATIVE_CASES = [
    (["router.polcy=x"], "additional properties 'polcy' not allowed"),
    (["monitorng.prometheusRule.enabled=false"], "additional properties 'monitorng' not allowed"),
    (["decode.probes.readines.periodSeconds=1"], "additional properties 'readines' not allowed"),
    (["tls.enabled=true"], "/tls/secretName"),
    (["tls.enabled=true", "tls.secretName=s", "tls.workerIdentity.enabled=true"],
     "tls.workerIdentity.issuer.name is required"),
    (["tls.workerIdentity.uriPrefix=decode"], "/tls/workerIdentity/uriPrefix"),
    (["tls.workerIdentity.issuer.kind=Vault"], "/tls/workerIdentity/issuer/kind"),
    (["decode.autoscaling.ttftSloMiss.target=5%"], "/decode/autoscaling/ttftSloMiss/target"),
    (["model.generate.enabled=false"], "/model/volume"),
    (["decode.backend=rocm"], "value must be one of 'cpu', 'cuda'"),
    (["decode.replicas=-1"], "/decode/replicas"),
    (["router.slo.ttft=fast"], "/router/slo/ttft"),
    (["router.slo.tpot=120ms"], "/router/slo/tpot"),
    (["model.name=../etc"], "/model/name"),
    (["decode.extraArgs[0]=max_num_seqs=4"], "/decode/extraArgs/0"),
    (["kvTransfer.rdma.enabled=true", "kvTransfer.rdma.resourceName=hca"],
     "/kvTransfer/rdma/resourceName"),
    # A duration the Prometheus operator rejects (fractions, smallest unit first).
    (["decode.podMonitor.interval=1.5s"], "/decode/podMonitor/interval"),
    (["router.podMonitor.interval=30s1m"], "/router/podMonitor/interval"),
    (["gpu.resourceName=gpu"], "/gpu/resourceName"),
    (["decode.autoscaling.enabled=true", "decode.autoscaling.maxReplicas=0"],
     "/decode/autoscaling/maxReplicas"),
    (["prefill.autoscaling.enabled=true", "prefill.autoscaling.minReplicas=4",
      "prefill.autoscaling.maxReplicas=2"], "prefill.autoscaling.maxReplicas: 2 is below"),
    (["router.ingress.enabled=true", "router.ingress.host=Bad_Host"], "/router/ingress/host"),
    (["router.ingress.enabled=true", "router.http.enabled=false"],
     "router.ingress.enabled needs router.http.enabled"),
    (["router.priorityClassName=High"], "/router/priorityClassName"),
    (["networkPolicy.apiFrom=everyone"], "/networkPolicy/apiFrom"),
]


def cmd_negative(a):
    failed = False
    for sets, message in NEGATIVE_CASES:
        proc = render(a.tools, sets=sets, check=False)
        ok = proc.returncode != 0 and message in proc.stderr
        print(f"negative {' '.join(sets)}: exit {proc.returncode}, "
              f"{'names' if ok else 'DOES NOT name'} {message!r}")
        if not ok:
            print(proc.stderr)
            failed = True
    return 1 if failed else 0


@functools.lru_cache(maxsize=None)
def listed_flags(bin_dir, binary):
    """The flags `binary --help` lists."""
    proc = subprocess.run([os.path.join(bin_dir, binary), "--help"], capture_output=True,
                          text=True, timeout=30)
    if proc.returncode != 0:
        sys.exit(f"{binary} --help exited {proc.returncode}")
    return frozenset(re.findall(r"^  --([a-z0-9_]+)  \(default", proc.stdout, re.M))


def cmd_flags(a):
    failed = False
    checked = 0
    for scenario in scenarios():
        for workload, template in pod_specs(objects(render(a.tools, scenario).stdout)):
            for c in template["spec"].get("initContainers", []) + template["spec"]["containers"]:
                binary = c["command"][0]
                known = listed_flags(a.bin_dir, binary)
                for arg in c.get("args", []):
                    name = re.match(r"^--([a-z0-9_]+)", arg)
                    checked += 1
                    if not name or name.group(1) not in known:
                        failed = True
                        print(f"{scenario}: {workload['metadata']['name']}/{c['name']}: "
                              f"{arg!r} is not a flag of {binary} --help")
    print(f"flags: {checked} arguments checked")
    return 1 if failed else 0


def cmd_selftest(a):
    """Plants one defect per check in the default render; each must be reported."""
    base = objects(render(a.tools).stdout)

    def find(objs, kind, suffix):
        return next(o for o in objs if o["kind"] == kind and o["metadata"]["name"].endswith(suffix))

    def first_container(objs, kind, suffix):
        return find(objs, kind, suffix)["spec"]["template"]["spec"]["containers"][0]

    def plant(description, expected, mutate):
        objs = copy.deepcopy(base)
        mutate(objs)
        problems = cross_object_problems(objs) + embedded_copy_problems(objs)
        hit = any(expected in p for p in problems)
        print(f"selftest {description}: {'reported' if hit else 'MISSED'}")
        return hit

    results = [
        plant("service targetPort", "targetPort grpcc",
              lambda o: find(o, "Service", "-router")["spec"]["ports"][0].update(
                  targetPort="grpcc")),
        plant("statefulset headless", "not headless",
              lambda o: find(o, "Service", "-prefill")["spec"].pop("clusterIP")),
        plant("statefulset serviceName", "serviceName names no Service",
              lambda o: find(o, "StatefulSet", "-prefill")["spec"].update(serviceName="nope")),
        plant("selector", "selector does not match",
              lambda o: find(o, "Deployment", "-decode")["spec"]["selector"]["matchLabels"]
              .update({"pdserve.io/role": "prefill"})),
        plant("probe port", "readinessProbe port 1",
              lambda o: first_container(o, "Deployment", "-decode")["readinessProbe"]["grpc"]
              .update(port=1)),
        plant("monitor port", "port metric is not",
              lambda o: find(o, "PodMonitor", "-decode")["spec"]["podMetricsEndpoints"][0]
              .update(port="metric")),
        plant("extended resource", "needs requests == limits",
              lambda o: first_container(o, "Deployment", "-decode")["resources"]["requests"]
              .update({"nvidia.com/gpu": 1})),
        plant("rdma capability", "IPC_LOCK",
              lambda o: first_container(o, "Deployment", "-decode")["resources"].update(
                  requests={"rdma/hca": 1}, limits={"rdma/hca": 1})),
        plant("grace period", "not above --drain_timeout",
              lambda o: find(o, "Deployment", "-decode")["spec"]["template"]["spec"].update(
                  terminationGracePeriodSeconds=10)),
        plant("duplicate", "duplicate kind/name", lambda o: o.append(copy.deepcopy(o[0]))),
        plant("dns name", "DNS-1123",
              lambda o: find(o, "Service", "-router")["metadata"].update(name="Router_1")),
        plant("volume mount", "undefined volume",
              lambda o: first_container(o, "Deployment", "-decode")["volumeMounts"].append(
                  {"name": "cache", "mountPath": "/cache"})),
        plant("configmap volume", "which the release does not create",
              lambda o: find(o, "Deployment", "-router")["spec"]["template"]["spec"]["volumes"]
              .append({"name": "x", "configMap": {"name": "other"}})),
        plant("pdb selector", "PodDisruptionBudget",
              lambda o: find(o, "PodDisruptionBudget", "-router")["spec"]["selector"].update(
                  matchLabels={"pdserve.io/role": "none"})),
        plant("objective", "is not --slo_ttft",
              lambda o: first_container(o, "Deployment", "-router")["args"].append(
                  "--slo_ttft=1s")),
        plant("embedded rules", "groups differ",
              lambda o: find(o, "PrometheusRule", "pdserve")["spec"]["groups"][0]["rules"]
              .pop()),
        plant("emulated backend elsewhere", "--backend=emulated set",
              lambda o: first_container(o, "Deployment", "-decode")["args"].append(
                  "--backend=emulated")),
    ]
    # The emulated checks, on the emulated scenario's render.
    emulated = objects(render(a.tools, "emulated-control-plane").stdout)

    def planter(rendered, check):
        """A plant() on another render, reported by `check`."""
        def plant_on(description, expected, mutate):
            objs = copy.deepcopy(rendered)
            mutate(objs)
            hit = any(expected in p for p in check(objs))
            print(f"selftest {description}: {'reported' if hit else 'MISSED'}")
            return hit
        return plant_on

    plant_emulated = planter(emulated, embedded_copy_problems)

    results += [
        plant_emulated("emulated gpu", "emulated workers request",
                       lambda o: first_container(o, "StatefulSet", "-prefill")["resources"]
                       ["limits"].update({"nvidia.com/gpu": 1})),
        plant_emulated("emulated backend missing", "--backend=emulated missing",
                       lambda o: first_container(o, "Deployment", "-decode")["args"].remove(
                           "--backend=emulated")),
        plant_emulated("emulated pool flag", "--kv_cache_bytes with an emulated pool",
                       lambda o: first_container(o, "Deployment", "-decode")["args"].append(
                           "--kv_cache_bytes=1")),
        plant_emulated("emulated profile copy", "profile.json differs",
                       lambda o: find(o, "ConfigMap", "-emulated-profile")["data"].update(
                           {"profile.json": "{}"})),
    ]
    # The platform checks (policies, autoscalers, Ingress, ServiceAccount), on that scenario.
    platform = objects(render(a.tools, "platform").stdout)

    plant_platform = planter(platform, cross_object_problems)

    def policy_rule(objs, suffix, port):
        rules = find(objs, "NetworkPolicy", suffix)["spec"]["ingress"]
        return next(r for r in rules if any(p.get("port") == port for p in r.get("ports", [])))

    results += [
        plant_platform("registry closed to workers", "decode pods cannot reach router pods' "
                       "registry", lambda o: policy_rule(o, "-router", "registry")["from"][0]
                       ["podSelector"]["matchExpressions"][0].update(values=["prefill"])),
        plant_platform("worker grpc closed to the router", "router pods cannot reach prefill",
                       lambda o: policy_rule(o, "-prefill", "grpc")["from"].pop(0)),
        plant_platform("policy port", "port grpcc is not a port",
                       lambda o: policy_rule(o, "-decode", "grpc")["ports"][0].update(
                           port="grpcc")),
        plant_platform("hpa target", "is not in the release",
                       lambda o: find(o, "HorizontalPodAutoscaler", "-decode")["spec"]
                       ["scaleTargetRef"].update(name="pd-pdserve-decoder")),
        plant_platform("hpa external metric", "is not served by",
                       lambda o: next(m for m in find(o, "HorizontalPodAutoscaler", "-prefill")
                                      ["spec"]["metrics"] if m["type"] == "External")
                       ["external"]["metric"].update(name="pdserve_ttft_miss")),
        plant_platform("hpa external metric namespace", "not its release's",
                       lambda o: next(m for m in find(o, "HorizontalPodAutoscaler", "-prefill")
                                      ["spec"]["metrics"] if m["type"] == "External")
                       ["external"]["metric"]["selector"]["matchLabels"].update(
                           namespace="other")),
        plant_platform("hpa and replicas", "which the autoscaler owns",
                       lambda o: find(o, "Deployment", "-decode")["spec"].update(replicas=3)),
        plant_platform("ingress port", "has no port httpp",
                       lambda o: find(o, "Ingress", "-router")["spec"]["rules"][0]["http"]
                       ["paths"][0]["backend"]["service"]["port"].update(name="httpp")),
        plant_platform("service account", "is not the release's ServiceAccount",
                       lambda o: find(o, "Deployment", "-router")["spec"]["template"]["spec"]
                       .update(serviceAccountName="default")),
        plant_platform("token mounted", "mounts a ServiceAccount token",
                       lambda o: find(o, "StatefulSet", "-prefill")["spec"]["template"]["spec"]
                       .pop("automountServiceAccountToken")),
    ]
    clean = cross_object_problems(base) + embedded_copy_problems(base)
    clean += cross_object_problems(emulated) + embedded_copy_problems(emulated)
    clean += cross_object_problems(platform) + embedded_copy_problems(platform)
    for p in clean:
        print(f"  {p}")
    print(f"selftest clean renders: {len(clean)} problems")
    return 0 if all(results) and not clean else 1


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["lint", "golden", "types", "cross", "negative",
                                            "flags", "selftest"])
    parser.add_argument("--tools", required=True,
                        help="Directory set up by tools/setup_tools.sh (helm, node_modules).")
    parser.add_argument("--bin-dir", help="Directory of the pdserve binaries (flags).")
    parser.add_argument("--update", action="store_true", help="golden: rewrite the goldens.")
    parser.add_argument("--keep", action="store_true", help="types: print the TypeScript.")
    a = parser.parse_args()
    return globals()["cmd_" + a.command](a)


if __name__ == "__main__":
    sys.exit(main())
