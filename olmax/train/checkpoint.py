"""Checkpoints: train state, loader state and run metadata in one atomic Orbax step directory.

Contract. `save(step, ...)` writes `DIR/<step>/{state,data,meta}` through an Orbax
`CheckpointManager`: asynchronously (the arrays are copied off the devices before `save` returns,
the files are written in the background) into a temporary directory that is renamed to `<step>`
only once every item is complete. A process killed at any moment, even mid-write, therefore leaves
the newest *complete* step as `latest_step()`; half-written temporaries are ignored and cleaned up.
Only the newest `keep` steps are kept. `restore` places arrays directly in the shardings of the
abstract state it is given, so a checkpoint written on 8 devices restores onto 2 (or onto 2 processes).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orbax.checkpoint as ocp

from olmax.data.loader_checkpoint import LoaderRestore, LoaderSave
from olmax.data.state import LoaderState
from olmax.errors import OlmaxError
from olmax.train.config import CheckpointConfig


class Checkpointer:
    """A thin wrapper over `ocp.CheckpointManager` with olmax's three items."""

    def __init__(self, directory: str | Path, cfg: CheckpointConfig):
        self.directory = Path(directory).resolve()
        options = ocp.CheckpointManagerOptions(max_to_keep=cfg.keep, create=True,
                                               enable_async_checkpointing=cfg.async_save,
                                               cleanup_tmp_directories=True)
        self.mngr = ocp.CheckpointManager(self.directory, options=options)

    def latest_step(self) -> int | None:
        return self.mngr.latest_step()

    def all_steps(self) -> list[int]:
        return list(self.mngr.all_steps())

    def save(self, step: int, state: Any, loader_state: LoaderState, meta: dict) -> None:
        args = ocp.args.Composite(state=ocp.args.StandardSave(state), data=LoaderSave(loader_state),
                                  meta=ocp.args.JsonSave(meta))
        self.mngr.save(step, args=args, force=True)

    def restore(self, step: int, abstract_state: Any) -> tuple[Any, LoaderState, dict]:
        """(train state in the abstract state's shardings, loader state, metadata) of `step`."""
        args = ocp.args.Composite(state=ocp.args.StandardRestore(abstract_state), data=LoaderRestore(),
                                  meta=ocp.args.JsonRestore())
        try:
            out = self.mngr.restore(step, args=args)
        except (ValueError, KeyError, TypeError) as e:
            raise OlmaxError(f"{self.directory / str(step)}: cannot restore the train state ({e}); the model "
                             f"or optimizer shape in the config differs from the one that wrote it: use "
                             f"the run's own config ({self.directory.parent / 'config.yaml'})") from e
        return out.state, out.data, dict(out.meta)

    def wait(self) -> None:
        self.mngr.wait_until_finished()

    def close(self) -> None:
        self.mngr.wait_until_finished()
        self.mngr.close()


def restore_init(step_dir: str | Path, abstract_state: Any) -> Any:
    """The train state item of a checkpoint step directory (`RUN/checkpoints/STEP`), for `train.init_from`."""
    path = Path(step_dir).resolve() / "state"
    if not path.is_dir():
        raise OlmaxError(f"train.init_from {step_dir}: no `state` item there; point it at a checkpoint step "
                         f"directory such as RUN_DIR/checkpoints/1413814")
    with ocp.StandardCheckpointer() as ckptr:
        try:
            return ckptr.restore(path, abstract_state)
        except (ValueError, KeyError, TypeError) as e:
            raise OlmaxError(f"train.init_from {step_dir}: does not match this config's model/optimizer ({e})") from e
