"""A container engine that runs here, found by trying it: podman, rootful, daemonless.

What this machine needed (the first that runs `true` in the base image wins; each failure's
last line is kept for the skip or failure message):
- podman's default rlimits (nofile 1048576) exceed the hard limits here and root lacks
  CAP_SYS_RESOURCE: crun/runc fail "setrlimit RLIMIT_NOFILE / RLIMIT_NPROC: Operation not
  permitted"; so nofile and nproc are set within the hard limits (`--ulimit`);
- crun 1.8 refuses cgroup v1 with a unified hierarchy beside it ("cgroups in hybrid mode not
  supported, drop all controllers from cgroupv2"), even with --cgroups=disabled; runc runs.
"""

from __future__ import annotations

import resource
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INSTALLER = ROOT / "docker" / "container-dev" / "install"
BASE = "localhost/kg-base:bookworm"


def _limits() -> list[str]:
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nofile = 65536 if nofile == resource.RLIM_INFINITY else min(nofile, 65536)
    return ["--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", "nproc=4096:4096"]


@dataclass
class Engine:
    """`podman` with the global options (`engine`) and the run/build options (`limits`)
    that work here."""

    engine: list[str]
    limits: list[str] = field(default_factory=list)

    def command(self, verb: str, *args: str) -> list[str]:
        extra = self.limits if verb in ("run", "build", "create") else []
        return [*self.engine, verb, *extra, *args]

    def run(self, verb: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.command(verb, *args), capture_output=True, text=True, timeout=timeout
        )


def find_engine(base: str = BASE) -> Engine | str:
    """The first way of running podman that runs a container of `base` here, or why none."""
    podman = shutil.which("podman")
    if podman is None:
        return "needs podman (docker/container-dev/install, as root)"
    if subprocess.run([podman, "image", "exists", base], capture_output=True).returncode:
        return f"needs the base image {base} (docker/container-dev/install, as root)"
    runc = shutil.which("runc") or "/usr/sbin/runc"
    tried = [Engine([podman]), Engine([podman], _limits())]
    if Path(runc).exists():
        tried.append(Engine([podman, "--runtime", runc], _limits()))
    said = []
    for engine in tried:
        done = engine.run("run", "--rm", base, "true", timeout=60)
        if done.returncode == 0:
            return engine
        last = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        said.append(f"`{' '.join(engine.command('run', '--rm', base, 'true'))}`: {last}")
    return "no way of running podman works here: " + "; ".join(said)


def install() -> str:
    """Run docker/container-dev/install; '' when it finished, else why not."""
    try:
        done = subprocess.run([str(INSTALLER)], capture_output=True, text=True, timeout=1200)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"could not run {INSTALLER}: {e}"
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        return f"{INSTALLER} failed: {said}"
    return ""
