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

import sys
from pathlib import Path
from typing import Any

import orbax.checkpoint as ocp

from olmax.data.loader_checkpoint import LoaderRestore, LoaderSave
from olmax.data.state import LoaderState
from olmax.errors import OlmaxError
from olmax.train.config import CheckpointConfig

COMMIT_MARKER = "commit_success.txt"  # Orbax writes it into a step directory once every item is complete


class Checkpointer:
    """A thin wrapper over `ocp.CheckpointManager` with olmax's three items."""

    def __init__(self, directory: str | Path, cfg: CheckpointConfig):
        self.directory = Path(directory).resolve()
        options = ocp.CheckpointManagerOptions(max_to_keep=cfg.keep, create=True,
                                               enable_async_checkpointing=cfg.async_save,
                                               cleanup_tmp_directories=True)
        self.mngr = ocp.CheckpointManager(self.directory, options=options)

    def latest_step(self) -> int | None:
        """The newest complete step. Newer step directories without Orbax's commit marker (copied or cut
        short after the rename) are moved aside to `checkpoints-incomplete/` (kept, never deleted, and
        out of the way of the rerun's own saves) when an older step carries its marker; stderr says so."""
        steps = sorted(self.mngr.all_steps(), reverse=True)
        committed = [s for s in steps if (self.directory / str(s) / COMMIT_MARKER).exists()]
        if not committed:
            return steps[0] if steps else None  # a writer that leaves no markers: trust the renames
        for s in steps[:steps.index(committed[0])]:
            aside = self.directory.parent / f"{self.directory.name}-incomplete" / str(s)
            while aside.exists():
                aside = aside.with_name(aside.name + "+")
            aside.parent.mkdir(exist_ok=True)
            (self.directory / str(s)).rename(aside)
            print(f"olmax: warning: {self.directory / str(s)} has no {COMMIT_MARKER} (incomplete): moved to "
                  f"{aside}; resuming from step {committed[0]}, the newest complete checkpoint", file=sys.stderr)
        if committed[0] != steps[0]:
            self.mngr.reload()
        return committed[0]

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
        # shapes first, from the metadata alone: a mismatch found by the restore itself leaves Orbax's
        # pending reads to print tracebacks at exit
        why = self.shape_mismatch(step, abstract_state)
        try:
            if why:
                raise ValueError(why)
            out = self.mngr.restore(step, args=args)
        except (ValueError, KeyError, TypeError) as e:
            why = why or self.shape_mismatch(step, abstract_state) or str(e)[:300]
            self.close()
            raise OlmaxError(f"{self.directory / str(step)}: cannot restore the train state ({why}); the model "
                             f"or optimizer shape in the config differs from the one that wrote it: use "
                             f"the run's own config ({self.directory.parent / 'config.yaml'})") from e
        except Exception as e:  # noqa: BLE001 - TensorStore reports unreadable data as a bare Exception
            self.close()
            older = [s for s in self.mngr.all_steps() if s < step]
            fix = (f"move it aside to resume from step {max(older)}" if older else "move it aside to start over")
            raise OlmaxError(f"{self.directory / str(step)}: the checkpoint is corrupt or truncated "
                             f"({str(e).splitlines()[0][:200]}); {fix}") from e
        return out.state, out.data, dict(out.meta)

    def shape_mismatch(self, step: int, abstract_state: Any) -> str:
        """The first array (parameters first) whose saved shape differs from `abstract_state`'s, as
        "params['embed']: checkpoint (64, 1024), config (32, 1024)"; "" when none or unknown."""
        import logging

        import jax

        absl = logging.getLogger("absl")
        level = absl.level
        absl.setLevel(logging.ERROR)  # Orbax logs a missing-metadata warning to stderr
        try:
            with ocp.StandardCheckpointer() as ckptr:
                saved = ckptr.metadata(self.directory / str(step) / "state")
            saved = getattr(saved, "item_metadata", saved)
            shapes = {jax.tree_util.keystr(p): tuple(getattr(v, "shape", ()))
                      for p, v in jax.tree_util.tree_flatten_with_path(saved)[0]}
        except Exception:  # noqa: BLE001 - a diagnosis only; the caller reports the original error
            return ""
        finally:
            absl.setLevel(level)
        leaves = jax.tree_util.tree_flatten_with_path(abstract_state)[0]
        for path, leaf in sorted(leaves, key=lambda pl: not jax.tree_util.keystr(pl[0]).startswith("['params']")):
            key, shape = jax.tree_util.keystr(path), tuple(getattr(leaf, "shape", ()))
            if key not in shapes:
                return f"{key}: not in the checkpoint"
            if shapes[key] != shape:
                return f"{key}: checkpoint {shapes[key]}, config {shape}"
        return ""

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
