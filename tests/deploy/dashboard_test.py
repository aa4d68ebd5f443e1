#!/usr/bin/env python3
"""Checks of the Grafana dashboards deploy/grafana/*.json without Grafana (label "deploy").

Grafana ships no validator; these are the steps that each caught a planted defect:
  current   the JSON equals what deploy/grafana/dashboards.py writes (the JSON is generated).
  types     tsc --strict against @grafana/schema's Dashboard and per-plugin Options/FieldConfig
            types (deep-partial: Grafana fills defaults; unknown keys still fail).
  lint      unique panel ids, gridPos inside 24 columns and not overlapping, unique refIds,
            every $variable defined, no hard-coded data source uid.
  promql    every expr, variables substituted, parses (promtool check rules).
The fourth step, every query returning data from a live Prometheus scraping a real cluster, is
prometheus_live_test. Each subcommand also plants its defect and fails if it goes unseen.
"""

import argparse
import copy
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

from typescript_check import typecheck

SCRIPT_DIR = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.path.abspath(os.path.join(SCRIPT_DIR, "..", ".."))
DASHBOARD_DIR = os.path.join(SOURCE_DIR, "deploy", "grafana")
BUILTIN_VARIABLES = {"__rate_interval", "__interval", "__range", "__interval_ms",
                     "__range_s", "__dashboard", "__from", "__to"}
# What Grafana would put in place of its variables, for parsing and live queries.
SUBSTITUTIONS = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "5m",
                 "$namespace": ".*", "$model": ".*"}
# panel type -> (module of its types, its custom field config type; stat has none).
PLUGIN_TYPES = {
    "timeseries": ("@grafana/schema/dist/types/raw/composable/timeseries/panelcfg/x/types.gen",
                   "timeseries.FieldConfig"),
    "stat": ("@grafana/schema/dist/types/raw/composable/stat/panelcfg/x/types.gen",
             "Record<string, never>"),
}


def dashboards():
    return {os.path.basename(p): json.load(open(p))
            for p in sorted(glob.glob(os.path.join(DASHBOARD_DIR, "*.json")))}


def all_panels(dashboard):
    for panel in dashboard.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def expressions(dashboard):
    for panel in all_panels(dashboard):
        for target in panel.get("targets", []):
            if "expr" in target:
                yield panel.get("title", ""), target["expr"]


def substitute(expr):
    for variable, value in SUBSTITUTIONS.items():
        expr = expr.replace(variable, value)
    return expr


def lint_problems(dashboard):
    problems = []
    defined = {v["name"] for v in dashboard.get("templating", {}).get("list", [])}
    ids = set()
    rectangles = []
    for panel in all_panels(dashboard):
        where = f"panel {panel.get('id')} {panel.get('title')!r}"
        if panel.get("id") in ids:
            problems.append(f"{where}: duplicate id")
        ids.add(panel.get("id"))
        pos = panel.get("gridPos", {})
        if pos.get("x", 0) + pos.get("w", 0) > 24:
            problems.append(f"{where}: wider than 24 columns")
        cells = {(x, y) for x in range(pos.get("x", 0), pos.get("x", 0) + pos.get("w", 0))
                 for y in range(pos.get("y", 0), pos.get("y", 0) + pos.get("h", 0))}
        for other, other_cells in rectangles:
            if cells & other_cells:
                problems.append(f"{where}: overlaps {other}")
        rectangles.append((where, cells))
        refs = [t.get("refId") for t in panel.get("targets", [])]
        if len(refs) != len(set(refs)) or None in refs:
            problems.append(f"{where}: refIds missing or repeated: {refs}")
        for source in [panel.get("datasource")] + [t.get("datasource")
                                                   for t in panel.get("targets", [])]:
            if source and not re.fullmatch(r"\$\{?datasource\}?", str(source.get("uid", ""))):
                problems.append(f"{where}: hard-coded data source uid {source.get('uid')!r}")
    text = json.dumps(dashboard)
    for name in set(re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", text)):
        if name not in defined and name not in BUILTIN_VARIABLES:
            problems.append(f"variable ${name} is used but not defined")
    return problems


def promql_problems(dashboard):
    exprs = list(expressions(dashboard))
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard_expr_{i}", "expr": substitute(expr)}
        for i, (_, expr) in enumerate(exprs)]}]}
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        json.dump(rules, f)  # JSON is YAML.
        f.flush()
        proc = subprocess.run(["promtool", "check", "rules", f.name], capture_output=True,
                              text=True)
    return [] if proc.returncode == 0 else [proc.stdout + proc.stderr]


def typescript_problems(tools, dashboard):
    body = copy.deepcopy(dashboard)
    panels = body.pop("panels", [])
    lines = [
        'import type * as dash from "@grafana/schema/dist/types/veneer/dashboard.types";',
        *[f'import type * as {kind} from "{module}";'
          for kind, (module, _) in PLUGIN_TYPES.items()],
        # String enums (GraphDrawStyle...) accept their values as JSON writes them.
        "type DeepPartial<T> = T extends number ? T : T extends string ? `${T}` :"
        " T extends Array<infer U> ? Array<DeepPartial<U>> :"
        " T extends object ? { [K in keyof T]?: DeepPartial<T[K]> } : T;",
        # dash.Panel types fieldConfig.custom by the plugin but leaves options untyped.
        "type PanelOf<O, F> = DeepPartial<Omit<dash.Panel<O, F>, 'type' | 'options'>>"
        " & { options?: DeepPartial<O> };",
        f"export const dashboard: DeepPartial<Omit<dash.Dashboard, 'panels'>> = "
        f"{json.dumps(body, indent=1)};",
    ]
    for i, panel in enumerate(panels):
        kind = panel.get("type")
        rest = {k: v for k, v in panel.items() if k != "type"}
        if kind == "row":
            rest.pop("panels", None)
            lines.append(f"export const p{i}: DeepPartial<Omit<dash.RowPanel, 'type' | "
                         f"'panels'>> = {json.dumps(rest, indent=1)};")
        elif kind in PLUGIN_TYPES:
            lines.append(f"export const p{i}: PanelOf<{kind}.Options, {PLUGIN_TYPES[kind][1]}> = "
                         f"{json.dumps(rest, indent=1)};")
        else:
            return [f"panel {panel.get('id')}: type {kind!r} has no types here"]
    code, output = typecheck(tools, "\n".join(lines) + "\n", "dashboard.ts")
    return [] if code == 0 else [output]


def first_timeseries(d):
    return next(p for p in all_panels(d) if p.get("type") == "timeseries")


# step -> (check, defect planted in a copy of the first dashboard, text the report must hold).
def _plant_type(d):
    first_timeseries(d)["options"]["legend"]["placment"] = "bottom"


def _plant_lint(d):
    panel = first_timeseries(d)
    panel["targets"][0]["expr"] += ' + on() vector($undefined_variable)'
    panel["datasource"] = {"type": "prometheus", "uid": "P1809F7CD0C75ACF3"}


def _plant_promql(d):
    first_timeseries(d)["targets"][0]["expr"] = "sum(rate(pdserve_router_requests_total[1m])"


def check(name, problems_of, plant, expected):
    failed = False
    for file, dashboard in dashboards().items():
        problems = problems_of(dashboard)
        print(f"{name} {file}: {len(problems)} problems")
        for p in problems:
            print("  " + p)
        failed |= bool(problems)
    planted = copy.deepcopy(next(iter(dashboards().values())))
    plant(planted)
    report = "\n".join(problems_of(planted))
    caught = all(e in report for e in expected)
    print(f"{name}: planted defect {'reported' if caught else 'MISSED'} ({', '.join(expected)})")
    if not caught:
        print(report)
    return 1 if failed or not caught else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["current", "types", "lint", "promql"])
    parser.add_argument("--tools", help="types: directory set up by tools/setup_tools.sh.")
    a = parser.parse_args()
    if not dashboards():
        sys.exit(f"no dashboards in {DASHBOARD_DIR}")
    if a.command == "current":
        return subprocess.run([sys.executable, os.path.join(DASHBOARD_DIR, "dashboards.py"),
                               "--check"]).returncode
    if a.command == "types":
        return check("types", lambda d: typescript_problems(a.tools, d), _plant_type,
                     ["placment"])
    if a.command == "lint":
        return check("lint", lint_problems, _plant_lint,
                     ["$undefined_variable", "hard-coded data source uid"])
    return check("promql", promql_problems, _plant_promql, ["dashboard_expr_0"])


if __name__ == "__main__":
    sys.exit(main())
