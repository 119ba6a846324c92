"""The loader's resumable state: a few integers and the data fingerprint, with OLMo-core's resume rule.

Contract. The state after handing out some batches is (fingerprint, seed, order, seq_len, epoch,
tokens_processed), where tokens_processed counts the tokens of this epoch's global batches handed
out so far (reset to 0 when an epoch ends, as in OLMo-core). It does not depend on the process
count, so any process count can restore it. Resuming with global batch G' continues at step
tokens_processed // (G' * L) of the same epoch (OLMo-core's `batches_processed` rule, which lets G
change by an integer factor); a step at or past the epoch's end starts the next epoch. A different
fingerprint, seed, order or sequence length is refused.
"""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass, fields

from olmax.errors import OlmaxError

STATE_VERSION = 1


@dataclass(frozen=True)
class LoaderState:
    """Where the batch stream stands; equal states give equal continuations."""

    fingerprint: str
    seed: int
    epoch: int
    tokens_processed: int
    seq_len: int
    global_batch_size: int
    order: str = "olmo-core"
    version: int = STATE_VERSION

    @property
    def batches_processed(self) -> int:
        """Batches of this epoch handed out, at the global batch size the state was saved with."""
        return self.tokens_processed // (self.global_batch_size * self.seq_len)

    def to_dict(self) -> dict:
        return {**asdict(self), "batches_processed": self.batches_processed}

    @classmethod
    def from_dict(cls, d: dict, *, origin: str = "loader state") -> LoaderState:
        names = [f.name for f in fields(cls)]
        missing = [n for n in names if n not in d and n not in ("order", "version")]
        if missing:
            raise OlmaxError(
                f"{origin}: missing {', '.join(missing)}; this is not an olmax loader "
                f"state (expected keys: {', '.join(names)})"
            )
        if int(d.get("version", STATE_VERSION)) > STATE_VERSION:
            raise OlmaxError(
                f"{origin}: state version {d['version']} is newer than this olmax "
                f"understands ({STATE_VERSION}); upgrade olmax"
            )
        return cls(**{n: d[n] for n in names if n in d})


def resume_step(
    state: LoaderState,
    *,
    fingerprint: str,
    seed: int,
    order: str,
    seq_len: int,
    global_batch_size: int,
    batches_per_epoch: int,
) -> tuple[int, int]:
    """(epoch, step) at which a loader with these settings continues `state`; refuses a mismatch."""
    if state.fingerprint != fingerprint:
        raise OlmaxError(
            f"loader state fingerprint {state.fingerprint[:16]}... differs from the data's "
            f"{fingerprint[:16]}...: the mix's files, their sizes, the dtype or the special "
            f"tokens changed since the checkpoint; restore the original mix or start a "
            f"new run"
        )
    if state.seed != seed:
        raise OlmaxError(
            f"loader state was saved with seed {state.seed} but the loader has seed {seed}; "
            f"a different seed is a different data order: use --seed {state.seed}"
        )
    if state.order != order:
        raise OlmaxError(
            f"loader state was saved with order {state.order!r}, the loader uses "
            f"{order!r}; set order={state.order!r} to resume"
        )
    if state.seq_len != seq_len:
        raise OlmaxError(
            f"loader state was saved at sequence length {state.seq_len}, the loader uses "
            f"{seq_len}; instances differ between lengths, so resume with --seq-len "
            f"{state.seq_len} or start a new stage"
        )
    batch_tokens = global_batch_size * seq_len
    if state.tokens_processed % batch_tokens:
        warnings.warn(
            f"resuming at {state.tokens_processed} tokens with {batch_tokens}-token batches: "
            f"not a whole number of batches, so OLMo-core's rule rounds down and the rows "
            f"of a partial batch are seen again",
            stacklevel=2,
        )
    step = state.tokens_processed // batch_tokens
    if step >= batches_per_epoch:
        return state.epoch + 1, 0
    return state.epoch, step


def advance(state: LoaderState, *, global_batch_size: int, batches_per_epoch: int) -> LoaderState:
    """The state after one more global batch of `global_batch_size` sequences."""
    batch_tokens = global_batch_size * state.seq_len
    tokens = state.tokens_processed + batch_tokens
    if tokens // batch_tokens >= batches_per_epoch:
        return LoaderState(
            state.fingerprint, state.seed, state.epoch + 1, 0, state.seq_len, global_batch_size, state.order
        )
    return LoaderState(
        state.fingerprint, state.seed, state.epoch, tokens, state.seq_len, global_batch_size, state.order
    )
