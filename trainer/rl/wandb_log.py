"""What a wandb run's transaction log holds: its `.wandb` files read back (no wandb server needed).

wandb-core appends every record of a run to `run-<id>.wandb` in the run's folder: a 7-byte header
(`:W&B`, magic, version), then LevelDB log blocks of 32 KiB whose chunks (checksum, length, type FULL /
FIRST / MIDDLE / LAST) carry protobuf `Record`s (wandb.proto.wandb_internal_pb2). It writes a block
to the file only when the block is full or the run finishes, so a process killed by SIGKILL loses
the records of its last block: the tracker reads back what its earlier segments hold before it
resumes the run (trainer/rl/tracking.py), and the tests read the history back the same way.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

BLOCK = 32768
CHUNK_HEADER = 7  # checksum uint32, length uint16, type uint8
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: str | Path) -> Iterator[Any]:
    """The whole records of one `.wandb` file, in order (a chunk cut short at the end is left out)."""
    from wandb.proto import wandb_internal_pb2

    data = Path(path).read_bytes()
    if data[:4] != b":W&B":
        raise ValueError(f"{path}: not a wandb transaction log (no :W&B header)")
    pos, buf = CHUNK_HEADER, b""
    while pos + CHUNK_HEADER <= len(data):
        if BLOCK - pos % BLOCK < CHUNK_HEADER:  # a block's tail too short for a chunk header is padding
            pos += BLOCK - pos % BLOCK
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + CHUNK_HEADER])
        end = pos + CHUNK_HEADER + length
        if kind == 0 or end > len(data):  # zero fill, or a block the writer did not finish
            break
        chunk = data[pos + CHUNK_HEADER : end]
        buf = chunk if kind in (FULL, FIRST) else buf + chunk
        pos = end
        if kind in (FULL, LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(buf)
            yield record


def segments(store: str | Path, run_id: str) -> list[Path]:
    """The offline segments of wandb run `run_id` under a tracking dir, oldest first (one per process)."""
    return sorted(Path(store).glob(f"wandb/offline-run-*-{run_id}/run-{run_id}.wandb"))


def history_key(item: Any) -> str:
    """A history item's key (a key with `/` is stored split into nested_key)."""
    return item.key or "/".join(item.nested_key)


def last_step(store: str | Path, run_id: str) -> int:
    """The last history step the offline segments of `run_id` hold (-1: none)."""
    steps = [
        r.history.step.num
        for f in segments(store, run_id)
        for r in records(f)
        if r.WhichOneof("record_type") == "history"
    ]
    return max(steps, default=-1)
