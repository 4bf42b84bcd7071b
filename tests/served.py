"""A real `kg serve` in a subprocess on a free loopback port, with its own data directory.

Keys are made before the server starts (the embedded store belongs to one process at a time),
through the same code `kg keys create` runs. `stop()` sends SIGTERM, as an operator would.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from kg import KG
from kg.server.keys import create_key

ROOT = Path(__file__).parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def kg_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KG_")}
    env.update(KG_HOME=str(home), KG_EMBEDDER="none")
    return env


def kg_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "kg.cli", *args]


async def make_keys(home: Path, wanted: Sequence[tuple[str, ...]]) -> dict[tuple[str, str], str]:
    """One key per (group, role[, channel]) (channel: the default, agent, unless given),
    stored in the data directory under `home`; found by (group, role)."""
    keys = {}
    async with await KG.open(home=home) as kg:
        for g, r, *channel in wanted:
            _, keys[(g, r)] = await create_key(kg.store, g, r, f"{g}-{r}", *channel)
    return keys


@dataclass
class Served:
    home: Path
    port: int
    keys: dict[tuple[str, str], str]
    process: subprocess.Popen[bytes] | None = None
    log_path: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log_path = self.home.parent / f"serve-{self.port}.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def key(self, group: str, role: str) -> str:
        return self.keys[(group, role)]

    def client(self, group: str | None = None, role: str = "admin") -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.key(group, role)}"} if group else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=60)

    def start(self, *extra: str) -> None:
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            kg_command("serve", "--port", str(self.port), *extra),
            cwd=ROOT,
            env=kg_env(self.home),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"kg serve exited: {self.log()}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"kg serve did not answer /health in 60 s: {self.log()}")

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM, then wait for the exit code (kill after `timeout`)."""
        proc, self.process = self.process, None
        if proc is None:
            return 0
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def serve(home: Path, wanted: Sequence[tuple[str, ...]], *extra: str) -> Served:
    keys = asyncio.run(make_keys(home, wanted))
    served = Served(home=home, port=free_port(), keys=keys)
    served.start(*extra)
    return served
