"""Orbax integration: save and restore a `LoaderState` beside the train state in one checkpoint.

Usage with a CheckpointManager (the item name is the caller's choice):

    mngr.save(step, args=ocp.args.Composite(train=..., data=LoaderSave(iterator.state)))
    state = mngr.restore(step, args=ocp.args.Composite(data=LoaderRestore())).data
    iterator = loader.iterate(state)

The state is the same on every process, so only the primary host writes it (one small JSON file);
every process, whatever the process count, reads it back.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import orbax.checkpoint as ocp
from etils import epath

from olmax.data.state import LoaderState
from olmax.errors import OlmaxError

STATE_FILE = "loader_state.json"


class LoaderStateHandler(ocp.CheckpointHandler):
    """Writes `loader_state.json` (primary host only); restores it as a `LoaderState`."""

    def save(self, directory: epath.Path, args: LoaderSave | None = None, item: Any = None) -> None:
        state = args.state if args is not None else item
        if not isinstance(state, LoaderState):
            raise TypeError(f"LoaderSave needs a LoaderState, got {type(state).__name__}")
        import jax

        if jax.process_index() != 0:
            return
        path = epath.Path(directory) / STATE_FILE
        tmp = epath.Path(directory) / f".{STATE_FILE}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(state.to_dict(), indent=1, sort_keys=True))
        tmp.rename(path)

    def restore(
        self, directory: epath.Path, args: LoaderRestore | None = None, item: Any = None
    ) -> LoaderState:
        path = epath.Path(directory) / STATE_FILE
        if not path.exists():
            raise OlmaxError(
                f"{path}: no loader state in this checkpoint; it was saved without "
                f"LoaderSave, so the data position is unknown"
            )
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise OlmaxError(f"{path}: corrupt loader state at char {e.pos} ({e.msg})") from e
        return LoaderState.from_dict(data, origin=str(path))

    def metadata(self, directory: epath.Path) -> None:
        return None

    def finalize(self, directory: epath.Path) -> None:
        pass

    def close(self) -> None:
        pass


@ocp.args.register_with_handler(LoaderStateHandler, for_save=True)
@dataclasses.dataclass
class LoaderSave(ocp.args.CheckpointArgs):
    """Save args: the loader state after the batches consumed by the checkpointed train state."""

    state: LoaderState


@ocp.args.register_with_handler(LoaderStateHandler, for_restore=True)
@dataclasses.dataclass
class LoaderRestore(ocp.args.CheckpointArgs):
    """Restore args: yields the saved `LoaderState`."""
