"""Checkpoints: train state, loader state and run metadata in one atomic Orbax step directory.

Contract. `save(step, ...)` writes `DIR/<step>/{state,data,meta}` through an Orbax
`CheckpointManager`: asynchronously (the arrays are copied off the devices before `save` returns,
the files are written in the background) into a temporary directory that is renamed to `<step>`
only once every item is complete. A process killed at any moment, even mid-write, therefore leaves
the newest *complete* step as `latest_step()`; half-written temporaries are ignored and cleaned up.
Only the newest `keep` steps are kept. `restore` places arrays directly in the shardings of the
abstract state it is given, so a checkpoint written on 8 devices restores onto 2 (or onto 2 processes).

Once a step is complete, process 0 seals it: `<step>/olmax-files.json` lists every file of the step with
its size. `restore_newest` checks a step against its seal before Orbax reads it, so a checkpoint cut short
after its commit (a copy interrupted, a disk filled by another writer) is found without reading the
arrays; it is moved aside to `checkpoints-corrupt/` (kept, never deleted) and the next older complete
step is used, and stderr says so. A run never silently starts over from step 0.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orbax.checkpoint as ocp

from olmax.atomic import write_text
from olmax.data.loader_checkpoint import LoaderRestore, LoaderSave, LoaderStateHandler
from olmax.data.state import LoaderState
from olmax.errors import OlmaxError
from olmax.train.config import CheckpointConfig

COMMIT_MARKER = "commit_success.txt"  # Orbax writes it into a step directory once every item is complete
SEAL = "olmax-files.json"  # olmax's list of a complete step's files and sizes


def seal(step_dir: Path) -> None:
    """Write `step_dir/olmax-files.json`: every file of the complete step, with its size in bytes."""
    sizes = {
        str(f.relative_to(step_dir)): f.stat().st_size
        for f in sorted(step_dir.rglob("*"))
        if f.is_file() and f.name != SEAL
    }
    write_text(step_dir / SEAL, json.dumps({"files": sizes}, indent=0, sort_keys=True) + "\n")


def seal_mismatch(step_dir: Path) -> str:
    """The first way `step_dir` differs from its seal ("state/d/ab12: 100 bytes, sealed with 4096"), or ""
    when it matches or has no seal (a step saved before olmax sealed, or killed between commit and seal)."""
    try:
        sealed = json.loads((step_dir / SEAL).read_text())["files"]
    except FileNotFoundError:
        return ""
    except (ValueError, KeyError, TypeError) as e:
        return f"{SEAL} unreadable ({e})"
    for name, size in sealed.items():
        f = step_dir / name
        if not f.is_file():
            return f"{name}: missing"
        if f.stat().st_size != size:
            return f"{name}: {f.stat().st_size} bytes, sealed with {size}"
    return ""


def committed_steps(directory: Path, steps: list[int]) -> list[int]:
    """Those of `steps` (newest first) whose directory carries Orbax's commit marker; all of them when none
    does (a writer that leaves no markers: trust the renames)."""
    return [s for s in steps if (directory / str(s) / COMMIT_MARKER).exists()] or steps


def complete_steps(directory: str | Path) -> list[int]:
    """The steps of a checkpoint directory that carry Orbax's commit marker and match their seal, newest
    first (`Checkpointer.latest_step`'s rule, as a read-only view that moves nothing: for readers of a
    run such as the evals)."""
    directory = Path(directory)
    steps = (
        sorted((int(p.name) for p in directory.iterdir() if p.is_dir() and p.name.isdigit()), reverse=True)
        if directory.is_dir()
        else []
    )
    return [s for s in committed_steps(directory, steps) if not seal_mismatch(directory / str(s))]


@dataclass(frozen=True)
class Layout:
    """How a step's arrays are laid out in files. `per_array`: one folder per array and one file per shard
    (a reader can fetch the parameters alone); else one OCDBT index for all (few files: local runs).
    `per_host`: each process writes its own shards into a folder of its own, every process the primary
    of its folder (hosts that share no disk: olmax.train.run_folder puts the parts together); implies
    `per_array`, since the parts of an OCDBT index are merged in one folder."""

    per_array: bool = False
    per_host: bool = False

    @property
    def files_per_array(self) -> bool:
        return self.per_array or self.per_host


class Checkpointer:
    """A thin wrapper over `ocp.CheckpointManager` with olmax's three items."""

    def __init__(self, directory: str | Path, cfg: CheckpointConfig, layout: Layout = Layout()):
        self.directory = Path(directory).resolve()
        self.layout = layout
        _quiet_worker_tracebacks()
        handlers = None
        multi = ocp.options.MultiprocessingOptions()
        if layout.files_per_array:
            import jax
            from orbax.checkpoint import type_handlers

            if layout.per_host:  # every host creates its folders and writes the metadata; shard 0 of each
                multi = ocp.options.MultiprocessingOptions(primary_host=None)  # array by its owner alone
            registry = type_handlers.create_type_handler_registry(
                (jax.Array, type_handlers.ArrayHandler(primary_host=multi.primary_host, replica_id=0))
            )
            handlers = {
                "state": ocp.PyTreeCheckpointHandler(
                    use_ocdbt=False, multiprocessing_options=multi, type_handler_registry=registry
                ),
                "data": LoaderStateHandler(),
                "meta": ocp.JsonCheckpointHandler(multiprocessing_options=multi),
            }
        options = ocp.CheckpointManagerOptions(
            max_to_keep=cfg.keep,
            create=True,
            enable_async_checkpointing=cfg.async_save,
            cleanup_tmp_directories=True,
            multiprocessing_options=multi,
            enable_per_process_directory_creation=layout.per_host,
        )
        self.mngr = ocp.CheckpointManager(self.directory, options=options, item_handlers=handlers)

    def latest_step(self) -> int | None:
        """The newest complete step. Newer step directories without Orbax's commit marker (copied or cut
        short after the rename) are moved aside to `checkpoints-incomplete/` (kept, never deleted, and
        out of the way of the rerun's own saves) when an older step carries its marker; stderr says so."""
        steps = sorted(self.mngr.all_steps(), reverse=True)
        committed = committed_steps(self.directory, steps)
        if not committed:
            return None
        for s in steps[: steps.index(committed[0])]:
            self._move_aside(s, "incomplete", f"has no {COMMIT_MARKER} (incomplete)", committed[0])
        self._sync("olmax-checkpoint-select")
        if committed[0] != steps[0]:
            self.mngr.reload()
        return committed[0]

    def restore_newest(self, abstract_state: Any) -> tuple[int, Any, LoaderState, dict] | None:
        """(step, state, loader state, metadata) of the newest complete, readable checkpoint; None when
        there is none at all. A step that differs from its seal, or (one process) whose arrays Orbax cannot
        read, is moved to `checkpoints-corrupt/` and the next older one is tried; when every checkpoint is
        unreadable this is an error, never a silent start from step 0."""
        import jax

        step = self.latest_step()
        moved: list[int] = []
        while step is not None:
            why = seal_mismatch(self.directory / str(step))
            if not why:
                try:
                    return (step, *self.restore(step, abstract_state, fallback=jax.process_count() == 1))
                except _Unreadable as e:
                    why = f"is corrupt or truncated ({e})"
            else:
                why = f"differs from its {SEAL} ({why})"
            self._sync("olmax-checkpoint-check")  # every process has looked before process 0 moves it
            older = [s for s in self.mngr.all_steps() if s < step]
            self._move_aside(step, "corrupt", why, max(older) if older else None)
            self._sync("olmax-checkpoint-corrupt")
            moved.append(step)
            self.mngr.reload()
            step = self.latest_step()
        if moved:
            self.close()
            raise OlmaxError(
                f"{self.directory}: no readable checkpoint (moved step(s) {moved} to "
                f"{self.directory.name}-corrupt/); refusing to start over from step 0: restore a "
                f"good copy, or remove the run directory to start afresh"
            )
        return None

    @staticmethod
    def _sync(name: str) -> None:
        import jax

        if jax.process_count() > 1:
            from jax.experimental import multihost_utils

            multihost_utils.sync_global_devices(name)

    def all_steps(self) -> list[int]:
        return list(self.mngr.all_steps())

    def save(self, step: int, state: Any, loader_state: LoaderState, meta: dict) -> None:
        item = ocp.args.PyTreeSave(state) if self.layout.files_per_array else ocp.args.StandardSave(state)
        args = ocp.args.Composite(state=item, data=LoaderSave(loader_state), meta=ocp.args.JsonSave(meta))
        with self._writing(step):
            self.mngr.save(step, args=args, force=True)
        self._seal_finished()  # Orbax's save waited for the previous one: it is complete now

    @contextmanager
    def _writing(self, step: int | None) -> Iterator[None]:
        """A failed checkpoint write (a full disk, a quota, a vanished mount) as one OlmaxError that says
        what is kept: the newest complete step, from which the same command resumes."""
        try:
            with _drained_event_loops():
                yield
        except OlmaxError:
            raise
        except Exception as e:  # noqa: BLE001 - TensorStore reports write errors as ValueError / bare Exception
            import re

            first = error_line(e)
            failed = re.search(r"/(\d+)\.orbax-checkpoint-tmp", first)  # an earlier, asynchronous save
            step = int(failed.group(1)) if failed else step
            where = self.directory / (str(step) if step is not None else "")
            complete = [s for s in complete_steps(self.directory) if step is None or s != step]
            kept = (
                f"the newest complete checkpoint is step {complete[0]}, where rerunning the same command "
                f"resumes"
                if complete
                else "no complete checkpoint is kept yet: a rerun starts over"
            )
            why = (
                "the disk is full" if ("File too large" in first or "No space left" in first) else "it failed"
            )
            at = first.rfind("Failed to write")
            detail = first[at:] if at >= 0 else first[-200:]
            raise OlmaxError(
                f"{where}: cannot write the checkpoint, {why} ({detail}); {kept}; free space and rerun"
            ) from e

    def _seal_finished(self) -> None:
        import jax

        if jax.process_index() != 0 or self.layout.per_host:  # a host's part is sealed with the others'
            return
        for s in self.mngr.all_steps():
            d = self.directory / str(s)
            if (d / COMMIT_MARKER).exists() and not (d / SEAL).exists():
                seal(d)

    def _move_aside(self, step: int, kind: str, why: str, newer_than: int | None) -> None:
        """Move step directory `step` to `checkpoints-<kind>/` (process 0; kept, never deleted) and warn."""
        import jax

        src = self.directory / str(step)
        aside = self.directory.parent / f"{self.directory.name}-{kind}" / str(step)
        while aside.exists():
            aside = aside.with_name(aside.name + "+")
        if jax.process_index() == 0 or self.layout.per_host:  # a host's own folder is moved by the host
            aside.parent.mkdir(exist_ok=True)
            src.rename(aside)
            then = (
                f"resuming from step {newer_than}, the newest complete checkpoint"
                if newer_than is not None
                else "no older checkpoint is left"
            )
            print(f"olmax: warning: {src} {why}: moved to {aside}; {then}", file=sys.stderr, flush=True)

    def restore(
        self, step: int, abstract_state: Any, *, fallback: bool = False
    ) -> tuple[Any, LoaderState, dict]:
        """(train state in the abstract state's shardings, loader state, metadata) of `step`. Unreadable
        array data is an OlmaxError, or `_Unreadable` with `fallback` (the caller then tries an older step)."""
        item = (
            ocp.args.PyTreeRestore(
                item=abstract_state, restore_args=ocp.checkpoint_utils.construct_restore_args(abstract_state)
            )
            if self.layout.files_per_array
            else ocp.args.StandardRestore(abstract_state)
        )
        args = ocp.args.Composite(state=item, data=LoaderRestore(), meta=ocp.args.JsonRestore())
        # shapes first, from the metadata alone: a mismatch found by the restore itself leaves Orbax's
        # pending reads to print tracebacks at exit
        why = self.shape_mismatch(step, abstract_state)
        try:
            if why:
                raise ValueError(why)
            with _drained_event_loops():
                out = self.mngr.restore(step, args=args)
        except (ValueError, KeyError, TypeError) as e:
            why = why or self.shape_mismatch(step, abstract_state) or str(e)[:300]
            self.close()
            raise OlmaxError(
                f"{self.directory / str(step)}: cannot restore the train state ({why}); the model "
                f"or optimizer shape in the config differs from the one that wrote it: use "
                f"the run's own config ({self.directory.parent / 'config.yaml'})"
            ) from e
        except Exception as e:  # noqa: BLE001 - TensorStore reports unreadable data as a bare Exception
            first = error_line(e)[:200]
            if fallback:
                raise _Unreadable(first) from e
            self.close()
            older = [s for s in self.mngr.all_steps() if s < step]
            fix = (
                f"move it aside to resume from step {max(older)}" if older else "move it aside to start over"
            )
            raise OlmaxError(
                f"{self.directory / str(step)}: the checkpoint is corrupt or truncated ({first}); {fix}"
            ) from e
        return out.state, out.data, dict(out.meta)

    def shape_mismatch(self, step: int, abstract_state: Any) -> str:
        """The first array (parameters first) whose saved shape differs from `abstract_state`'s, as
        "params['embed']: checkpoint (64, 1024), config (32, 1024)"; "" when none or unknown."""
        try:
            saved = saved_shapes(self.directory / str(step) / "state")
        except Exception:  # noqa: BLE001 - a diagnosis only; the caller reports the original error
            return ""
        return first_mismatch(saved, abstract_state)

    def wait(self) -> None:
        with self._writing(None):
            self.mngr.wait_until_finished()
        self._seal_finished()

    def close(self) -> None:
        try:
            with self._writing(None):
                self.mngr.wait_until_finished()
            self._seal_finished()
        finally:
            self.mngr.close()


@contextmanager
def _drained_event_loops() -> Iterator[None]:
    """Event loops created in the block are closed only once every task on them has finished.

    Orbax runs a restore (and a save's writes) on a fresh event loop and closes it as soon as one array
    read or write fails, while TensorStore's other operations are still in flight; when they complete they
    call back into the closed loop and print "Event loop is closed" tracebacks, from other threads, into
    the middle of olmax's messages. Here a loop's `close()` is deferred to the end of the block, which first
    runs the loop until its pending operations are done; their errors are collected, not logged. A loop
    closed after the block (a background save) is drained the same way at its close."""

    made: list[asyncio.AbstractEventLoop] = []
    active = [True]

    def drain_and_close(loop: asyncio.AbstractEventLoop) -> None:
        pending = asyncio.all_tasks(loop)
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        asyncio.SelectorEventLoop.close(loop)

    class Loop(asyncio.SelectorEventLoop):
        def __init__(self) -> None:
            super().__init__()
            self.set_exception_handler(lambda loop, context: None)  # the caller reports the first error

        def close(self) -> None:  # Orbax's close: deferred while the block runs
            if not active[0]:
                drain_and_close(self)
            elif self not in made:
                made.append(self)

    class Policy(asyncio.DefaultEventLoopPolicy):
        _loop_factory = Loop

    before = asyncio.get_event_loop_policy()
    asyncio.set_event_loop_policy(Policy())
    try:
        yield
    finally:
        asyncio.set_event_loop_policy(before)
        active[0] = False
        for loop in made:
            if not loop.is_closed() and not loop.is_running():
                drain_and_close(loop)


@contextmanager
def _quiet_absl() -> Iterator[None]:
    """Orbax warns on stderr, through absl, that the trainer's state item has no metadata file."""

    absl = logging.getLogger("absl")
    level = absl.level
    absl.setLevel(logging.ERROR)
    try:
        yield
    finally:
        absl.setLevel(level)


def saved_shapes(state_dir: Path) -> dict[str, tuple[int, ...]]:
    """{keystr of each array ("['params']['embed']"): its shape} of a saved state item. A per-array layout
    is read from the tree's `_METADATA` and each array's own zarr metadata, so a copy holding some arrays
    (a reader's: no optimizer state) lists those it holds; an OCDBT index through Orbax's metadata."""
    import jax

    state_dir = Path(state_dir)
    if (state_dir / "manifest.ocdbt").exists() or any(state_dir.glob("ocdbt.process_*")):
        with _quiet_absl(), ocp.PyTreeCheckpointer() as ckptr:
            tree = ckptr.metadata(state_dir)
        tree = getattr(tree, "item_metadata", tree)
        tree = getattr(tree, "tree", tree)
        return {
            jax.tree_util.keystr(p): tuple(getattr(v, "shape", ()))
            for p, v in jax.tree_util.tree_flatten_with_path(tree)[0]
        }
    entries = json.loads((state_dir / "_METADATA").read_text())["tree_metadata"]
    shapes: dict[str, tuple[int, ...]] = {}
    for entry in entries.values():
        keys = [k["key"] for k in entry["key_metadata"]]
        folder = state_dir / ".".join(keys)
        for name, field in ((".zarray", "shape"), ("zarr.json", "shape")):
            if (folder / name).is_file():
                shapes["".join(f"[{k!r}]" for k in keys)] = tuple(
                    json.loads((folder / name).read_text())[field]
                )
                break
    return shapes


def first_mismatch(saved: dict[str, tuple[int, ...]], abstract: Any) -> str:
    """The first array of `abstract` (parameters first) missing from `saved` (olmax `saved_shapes`) or of
    another shape there ("params['embed']: checkpoint (64, 1024), config (32, 1024)"); "" when all match."""
    import jax

    leaves = jax.tree_util.tree_flatten_with_path(abstract)[0]
    for path, leaf in sorted(leaves, key=lambda pl: not jax.tree_util.keystr(pl[0]).startswith("['params']")):
        key, shape = jax.tree_util.keystr(path), tuple(getattr(leaf, "shape", ()))
        if key not in saved:
            return f"{key}: not in the checkpoint"
        if saved[key] != shape:
            return f"{key}: checkpoint {saved[key]}, config {shape}"
    return ""


def read_params(step_dir: str | Path, abstract_params: Any, shardings: Any = None) -> Any:
    """The params of a committed step folder (`RUN/checkpoints/STEP`), read-only, placed in `shardings` (a
    tree like `abstract_params`; default: all on one device): each device reads its own shard, whatever
    mesh wrote the step, and the optimizer state beside them is not read. No CheckpointManager is opened,
    so a trainer saving into the same folder is never disturbed (a manager would clean up its in-flight
    temporary folders). OlmaxError naming the parameter when the step holds another model; Orbax's own
    exception when its files are unreadable or gone (the caller decides)."""
    import jax

    path = Path(step_dir).absolute() / "state"
    if shardings is None:
        device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
        shardings = jax.tree.map(lambda _: device, abstract_params)
    target = {
        "params": jax.tree.map(
            lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract_params, shardings
        )
    }
    why = first_mismatch(saved_shapes(path), target)
    if why:
        raise OlmaxError(f"{path.parent}: holds another model than the config's ({why})")
    with _quiet_absl(), ocp.PyTreeCheckpointer() as ckptr:
        out = ckptr.restore(
            path,
            args=ocp.args.PyTreeRestore(
                item=target,
                restore_args=ocp.checkpoint_utils.construct_restore_args(target),
                partial_restore=True,
            ),
        )
    return out["params"]


def read_step_info(step_dir: str | Path) -> tuple[LoaderState, dict]:
    """(loader state, metadata) saved with a step, read-only (see `read_params`)."""

    step_dir = Path(step_dir)
    loader_state = LoaderStateHandler().restore(step_dir / "data")
    try:
        meta = json.loads((step_dir / "meta" / "metadata").read_text())
    except (OSError, ValueError) as e:
        raise OlmaxError(f"{step_dir / 'meta' / 'metadata'}: unreadable run metadata ({e})") from e
    return loader_state, meta


def error_line(e: BaseException) -> str:
    """A TensorStore error's first line, without the spec dump it appends ("See full TensorStore details")."""
    return (str(e).split(" See full TensorStore details")[0].splitlines() or [""])[0]


class _WorkerTracebacks:
    """A logging filter for the "absl" logger: drops the tracebacks Orbax's background threads log when a
    write fails (its writer threads and its async commit thread). The same exception reaches the caller
    through the save's future, where `_writing` turns it into one olmax error line, so the logged copies
    are only noise before that line."""

    def filter(self, record) -> bool:
        return not (record.exc_info and "orbax" in record.pathname)


def _quiet_worker_tracebacks() -> None:
    absl = logging.getLogger("absl")
    if not any(isinstance(f, _WorkerTracebacks) for f in absl.filters):
        absl.addFilter(_WorkerTracebacks())


class _Unreadable(Exception):
    """Orbax could not read a step's array data (Checkpointer.restore with fallback=True)."""


# the ModelConfig fields that define the function a checkpoint computes (dtype, remat, attention kernel and
# scan grouping do not): an `init_from` folder must agree on all of them with the run's model
_ARCHITECTURE = (
    "vocab_size",
    "d_model",
    "n_layers",
    "n_heads",
    "n_kv_heads",
    "head_dim",
    "mlp_hidden",
    "vocab_multiple",
    "rms_eps",
    "rope_theta",
    "sliding_rope_theta",
    "sliding_window",
    "layer_types",
)


def is_params_folder(path: str | Path) -> bool:
    """True for a folder written by `olmax model convert --to olmax` (model_config.json + params/)."""
    return (Path(path) / "model_config.json").is_file() and (Path(path) / "params").is_dir()


def restore_init_params(folder: str | Path, model_cfg: Any, abstract_params: Any) -> Any:
    """The params of an `olmax model convert --to olmax` folder, for `train.init_from` (placed as
    `abstract_params` says); its model_config.json must describe the run's architecture."""
    folder = Path(folder).resolve()
    try:
        saved = json.loads((folder / "model_config.json").read_text())
    except ValueError as e:
        raise OlmaxError(f"train.init_from {folder / 'model_config.json'}: invalid JSON ({e})") from e
    for name in _ARCHITECTURE:
        ours = getattr(model_cfg, name)
        theirs = saved.get(name)
        if isinstance(ours, tuple):
            theirs = tuple(theirs or ())
        if name in saved and theirs != ours:
            raise OlmaxError(
                f"train.init_from {folder}: model {name} is {theirs!r} there but {ours!r} in this "
                "config; start from a checkpoint of the same architecture"
            )
    with ocp.StandardCheckpointer() as ckptr:
        try:
            return ckptr.restore(folder / "params", abstract_params)
        except (ValueError, KeyError, TypeError) as e:
            raise OlmaxError(
                f"train.init_from {folder}: params do not match this config's model ({e})"
            ) from e


def restore_init(step_dir: str | Path, abstract_state: Any) -> Any:
    """The train state item of a checkpoint step directory (`RUN/checkpoints/STEP`), for `train.init_from`."""
    path = Path(step_dir).resolve() / "state"
    if not path.is_dir():
        raise OlmaxError(
            f"train.init_from {step_dir}: no `state` item there; point it at a checkpoint step "
            f"directory such as RUN_DIR/checkpoints/1413814"
        )
    with ocp.StandardCheckpointer() as ckptr:
        try:
            return ckptr.restore(path, abstract_state)
        except (ValueError, KeyError, TypeError) as e:
            raise OlmaxError(
                f"train.init_from {step_dir}: does not match this config's model/optimizer ({e})"
            ) from e
