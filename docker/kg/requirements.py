"""Print kg's requirements (its dependencies and the named extras) from pyproject.toml, one
a line, so the image installs them in a layer of their own before kg's code is copied in.

    python3 requirements.py pyproject.toml serve,otel
"""

import sys
import tomllib


def requirements(pyproject: str, extras: str) -> list[str]:
    with open(pyproject, "rb") as f:
        project = tomllib.load(f)["project"]
    found = list(project["dependencies"])
    optional = project.get("optional-dependencies", {})
    for extra in filter(None, (e.strip() for e in extras.split(","))):
        if extra not in optional:
            raise SystemExit(f"requirements.py: no extra {extra!r} in {pyproject}")
        found += [r for r in optional[extra] if not r.startswith("kg[")]
    return found


if __name__ == "__main__":
    print("\n".join(requirements(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "")))
