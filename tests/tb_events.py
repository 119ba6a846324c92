"""Reading TensorBoard event files back in tests (no TensorFlow needed)."""

from __future__ import annotations

import struct
from pathlib import Path

from tensorboardX.proto.event_pb2 import Event


def tensorboard_scalars(path: Path) -> list[tuple[str, int, float]]:
    """(tag, step, value) of every scalar in a TensorBoard event file (TFRecord framing: length, its CRC,
    the Event proto, its CRC)."""
    data, pos, out = path.read_bytes(), 0, []
    while pos < len(data):
        (n,) = struct.unpack("<Q", data[pos : pos + 8])
        event = Event.FromString(data[pos + 12 : pos + 12 + n])
        pos += 12 + n + 4
        out += [(v.tag, event.step, v.simple_value) for v in event.summary.value]
    return out
