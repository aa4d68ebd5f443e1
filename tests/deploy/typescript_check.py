"""tsc --strict over one generated TypeScript file, against the types installed by
tools/setup_tools.sh; shared by chart_test.py and dashboard_test.py."""

import json
import os
import subprocess
import tempfile


def typecheck(tools, source, name="check.ts"):
    """Type-checks `source`; returns (tsc's exit code, its output)."""
    node_modules = os.path.join(tools, "node_modules")
    with tempfile.TemporaryDirectory() as work:
        with open(os.path.join(work, name), "w") as f:
            f.write(source)
        os.symlink(node_modules, os.path.join(work, "node_modules"))
        with open(os.path.join(work, "tsconfig.json"), "w") as f:
            json.dump({"compilerOptions": {
                "strict": True, "noEmit": True, "target": "es2020", "module": "commonjs",
                "moduleResolution": "node", "skipLibCheck": True, "types": []},
                "files": [name]}, f)
        proc = subprocess.run(["node", os.path.join(node_modules, "typescript", "bin", "tsc"),
                               "-p", work], capture_output=True, text=True)
    return proc.returncode, proc.stdout + proc.stderr
