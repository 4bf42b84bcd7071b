"""What a search of the embedded store's files must see: bytes as stored, and every string the
RDB format keeps LZF-compressed (the AOF base is an RDB image; redis compresses strings over
20 bytes), decompressed. A plain byte search of an RDB misses text inside those strings, so
an erasure test built on it could pass with the subject still on disk.

Under the default `appendfsync everysec`, an acknowledged write may not be in any file yet:
while a background fsync is still running, redis postpones the write() of its AOF buffer for
up to 2 s (and replies meanwhile), which a loaded machine hits often. A test that looks at the
files, or kills the server and expects the write back, first waits for `written_to_file`.

The scanner does not parse the RDB structure (FalkorDB's graph encoding is its own): it tries
every LZF string header the format can hold (0xC3, compressed length, original length) and
keeps what decompresses exactly to the announced length. A false header adds noise, never
hides a string.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from kg.store.falkordb import FalkorDBStore

_LZF = 0xC3  # RDB_ENCVAL (0b11 << 6) | RDB_ENC_LZF (3)


def _length(data: bytes, i: int) -> tuple[int, int] | None:
    """An RDB length at i: (value, next offset), or None."""
    if i >= len(data):
        return None
    first = data[i]
    kind = first >> 6
    if kind == 0:
        return first & 0x3F, i + 1
    if kind == 1:
        if i + 1 >= len(data):
            return None
        return ((first & 0x3F) << 8) | data[i + 1], i + 2
    if first == 0x80 and i + 5 <= len(data):
        return int.from_bytes(data[i + 1 : i + 5], "big"), i + 5
    if first == 0x81 and i + 9 <= len(data):
        return int.from_bytes(data[i + 1 : i + 9], "big"), i + 9
    return None


def lzf_decompress(data: bytes, size: int) -> bytes | None:
    """liblzf's format: a control byte below 32 starts a literal run of ctrl + 1 bytes; any
    other is a back reference (length in the top 3 bits, 7 meaning 'read one more byte')."""
    out = bytearray()
    i = 0
    while i < len(data):
        ctrl = data[i]
        i += 1
        if ctrl < 32:
            run = ctrl + 1
            if i + run > len(data):
                return None
            out += data[i : i + run]
            i += run
        else:
            length = ctrl >> 5
            if length == 7:
                if i >= len(data):
                    return None
                length += data[i]
                i += 1
            if i >= len(data):
                return None
            ref = len(out) - ((ctrl & 0x1F) << 8) - data[i] - 1
            i += 1
            if ref < 0:
                return None
            for _ in range(length + 2):
                out.append(out[ref])
                ref += 1
        if len(out) > size:
            return None
    return bytes(out) if len(out) == size else None


def lzf_strings(data: bytes) -> list[bytes]:
    found = []
    start = data.find(bytes([_LZF]))
    while start != -1:
        clen = _length(data, start + 1)
        ulen = _length(data, clen[1]) if clen else None
        if clen and ulen and 0 < clen[0] <= len(data) - ulen[1] and 0 < ulen[0] < 1 << 26:
            text = lzf_decompress(data[ulen[1] : ulen[1] + clen[0]], ulen[0])
            if text is not None:
                found.append(text)
        start = data.find(bytes([_LZF]), start + 1)
    return found


def readable(path: Path) -> bytes:
    """A file's bytes followed by every LZF string in it, decompressed."""
    data = path.read_bytes()
    return b"\n".join([data, *lzf_strings(data)])


def files_containing(home: Path, needle: str, *, decompress: bool = True) -> list[str]:
    """Files under home whose bytes (and, by default, decompressed strings) hold the needle,
    matched as UTF-8, ASCII letters case-insensitively."""
    want = needle.encode().lower()
    hits = []
    for path in sorted(home.rglob("*")):
        try:
            if path.is_file() and not path.is_socket():
                data = readable(path) if decompress else path.read_bytes()
            else:
                continue
        except OSError:  # a file the server removed while we walked (Neo4j rotates logs)
            continue
        if want in data.lower():
            hits.append(str(path.relative_to(home)))
    return hits


WRITE_WAIT = 30.0  # seconds; redis forces the write after 2, the rest is for a loaded machine


async def written_to_file(store: FalkorDBStore) -> None:
    """Wait until the embedded server has written its AOF buffer (`aof_buffer_length` 0): an
    acknowledged write is then in the file and survives a SIGKILL of the server."""
    deadline = time.monotonic() + WRITE_WAIT
    while (await store.client.connection.info("persistence"))["aof_buffer_length"]:
        if time.monotonic() > deadline:
            raise AssertionError(f"the AOF buffer was not written within {WRITE_WAIT:.0f} s")
        await asyncio.sleep(0.02)
