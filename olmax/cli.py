"""The `olmax` command: parse arguments and hand off to the library; no logic lives here.

The front end on top of the areas' front ends. Each area registers its own subcommands from its
`olmax/<area>/cli.py` through `register(subparsers)` (one `cli.py` per area: the same concept, a front
end, in each). Where a command of one area needs another area above it, this module hands it in:
`olmax train` gets the in-loop evals' builder (the evals area), `olmax model convert` the reading of a
training run (the train area). So every area's front end imports only its own area and those below.
Those modules import only argparse at module level, so `olmax --help` stays fast; heavy imports
(jax, tokenizers, ...) happen inside the command functions.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
from typing import Any

from olmax import assets_cli, demo_cli
from olmax.audit import audit_cli
from olmax.data import data_cli
from olmax.errors import OlmaxError
from olmax.evals import evals_cli
from olmax.model import model_cli
from olmax.model.libtpu import libtpu_env
from olmax.train import train_cli


def _in_loop_evals(cfg: Any) -> Any:
    """`olmax train`'s in-loop eval hook (olmax.evals.hook), built when a recipe evaluates in-loop."""
    from olmax.evals.hook import train_hook

    return train_hook(cfg)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="olmax",
        description="OLMo 3 pretraining in JAX, built around its data: prepare shards, load them in "
        "OLMo-core's order, audit the loader before launch, train, and evaluate held-out loss.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    # in `olmax --help` order
    assets_cli.register(sub)
    data_cli.register(sub)
    audit_cli.register(sub)
    model_cli.register(sub, convert_run=train_cli.convert_run)
    train_cli.register(sub, eval_hook=_in_loop_evals)
    evals_cli.register(sub)
    demo_cli.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    # numpy (imported by the parsers' modules) starts OpenBLAS's thread pool, whose threads spin for ~0.12
    # CPU-seconds after the import; nothing olmax runs on numpy uses BLAS (the model runs on XLA)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    # the TPU compiler settings olmax's kernels need, read once by libtpu when JAX starts the chip
    os.environ.update(libtpu_env(os.environ))
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        rc = args.func(args)
    except OlmaxError as e:
        # one line, whatever a library message quoted (YAML and pyarrow errors span several)
        message = " ".join(part.strip() for part in str(e).splitlines() if part.strip())
        print(f"olmax: error: {message}", file=sys.stderr)
        return e.code
    except BrokenPipeError:
        # stdout's reader left (`olmax assets list | head`): stop quietly, as a Unix filter does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except OSError as e:
        if e.errno not in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
            return _storage_failure(e, argv)
        # a full disk (or a file-size limit) is the machine's state, not a bug: one line, no traceback;
        # every output is written to a temporary name and renamed, so what was there before is intact
        print(
            f"olmax: error: {e.filename or 'an output file'}: {e.strerror} while writing; free disk space "
            "and rerun the same command",
            file=sys.stderr,
        )
        return 2
    except KeyboardInterrupt:
        print("olmax: interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        return _storage_failure(e, argv)
    return int(rc or 0)


def _storage_failure(e: Exception, argv: list[str] | None) -> int:
    """An object store's failure that no library call named a URL for (no credentials, a missing bucket,
    access denied): one line naming the command's URL of that store and the fix; anything else is a bug
    and keeps its traceback."""
    from olmax import storage

    mapped = storage.failure_in(e, list(sys.argv[1:] if argv is None else argv))
    if mapped is None:
        raise e
    print(f"olmax: error: {mapped}", file=sys.stderr)
    return mapped.code


if __name__ == "__main__":
    sys.exit(main())
