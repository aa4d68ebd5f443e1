#!/usr/bin/env python3
"""Checks that every alert in a Prometheus rules file links a runbook section that exists.

Usage: check_runbooks.py RULES.yaml RUNBOOKS.md
Each alert needs annotations.runbook_url of the form RUNBOOKS_URL#anchor (absolute: an alert
is read where the repository is not), and the anchor
must be a heading of RUNBOOKS.md (GitHub's anchor rules: lower case, spaces to dashes,
punctuation dropped); every alert also has a test case in the rules' .test.yaml beside it.
Exit 1 listing what is missing.
"""
import pathlib
import re
import sys

import yaml


RUNBOOKS_URL = "https://github.com/pdserve/pdserve/blob/main/docs/runbooks.md"


def anchors(markdown):
    out = set()
    for line in markdown.splitlines():
        m = re.match(r"^#{1,6}\s+(.*)$", line)
        if m:
            text = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower())
            out.add(text.replace(" ", "-"))
    return out


def main():
    rules_path, runbooks_path = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    rules = yaml.safe_load(rules_path.read_text())
    known = anchors(runbooks_path.read_text())
    tests = rules_path.with_suffix(".test.yaml").read_text()
    problems = []
    for group in rules["groups"]:
        for rule in group["rules"]:
            name = rule.get("alert")
            if not name:
                continue
            url = rule.get("annotations", {}).get("runbook_url", "")
            if not url.startswith(RUNBOOKS_URL + "#"):
                problems.append(f"{name}: runbook_url '{url}' is not {RUNBOOKS_URL}#...")
            elif url.split("#", 1)[1] not in known:
                problems.append(f"{name}: no heading for '#{url.split('#', 1)[1]}' in {runbooks_path}")
            if f"alertname: {name}" not in tests:
                problems.append(f"{name}: no alert_rule_test in {rules_path.with_suffix('.test.yaml')}")
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
