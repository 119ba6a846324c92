"""The settings of each `olmax audit` command, declared once: the config dataclass a library caller builds,
whose fields' metadata the CLI's options are generated from (olmax/cli_fields.py), so a default lives here
and nowhere else. Plain data, importing no numpy: `olmax audit X --help` reads it.

Each audit (loader_audit, leaks, dedup, emitted) takes its config from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from olmax.cli_fields import Option, setting
from olmax.data.stream import StreamSpec
from olmax.dedup.params import NearSettings

_NEAR_GATE = "gate: fraction of document tokens in removable near-duplicates (default 0.05)"
_THREADS = "files read and hashed at once (default 2; the compiled passes release the GIL)"


@dataclass(frozen=True)
class LoaderAuditConfig:
    """The stream audited (`StreamSpec`: mix, L, G, seed, order, ...) and how to audit it."""

    CONFIG_KEY: ClassVar[str] = "audit.loader"

    stream: StreamSpec = setting(cli=False)
    steps: int | None = setting(
        None, "audit this many global steps from the start", option=Option(exclusive="window")
    )  # None: whole epochs
    epochs: int | None = setting(
        None, "audit this many whole epochs (default 1)", option=Option(exclusive="window")
    )  # None with steps None: 1 epoch
    process_count: int = setting(1, "processes (ranks) the loader is sharded over (default 1)")
    resume_at: tuple[int, ...] = setting((), "save and restore the loader state before these stream steps")
    resume_process_count: int | None = setting(None, "process count after a --resume-at")
    share_tolerance: float = setting(
        0.02, "allowed |observed - planned| source share, on top of 4 sigma of sampling"
    )
    max_dup_instance_frac: float = setting(
        0.01,
        "allowed fraction of instances (and of emitted rows) whose content repeats another file/position",
    )
    max_dup_doc_frac: float = setting(
        0.05, "allowed fraction of document tokens in exact duplicate documents"
    )
    min_doc_tokens: int = setting(32, "shorter documents are not compared")
    content: bool = setting(True, "skip the content (hash) pass")
    threads: int = setting(2, _THREADS)
    examples: int = setting(10, cli=False)  # examples listed per failed check
    exposure_out: str | None = setting(
        None,
        "also write per-instance serve counts (.npz or .json, the format "
        "`olmax eval memorization --exposure` reads)",
    )
    span_tokens: int = setting(
        0,
        "also find repeated spans of this many tokens (50: ExactSubstr) across files and positions; "
        "0 (default) skips this slower pass",
    )  # > 0: gated by max_repeated_span_frac
    max_repeated_span_frac: float = setting(
        0.05, "allowed fraction of tokens inside a later copy of a repeated span (default 0.05)"
    )
    near: NearSettings | None = setting(None, cli=False)  # --near and --minhash-*: near-duplicate exposure
    max_near_dup_frac: float = setting(0.05, _NEAR_GATE, option=Option(group="near"))


@dataclass(frozen=True)
class LeakConfig:
    """The training mix (`stream`: its mix, base dir and {TOKENIZER} value are read), the eval sets, the
    tokenizer the mix was tokenized with, and the detection rule's settings."""

    CONFIG_KEY: ClassVar[str] = "audit.leaks"

    stream: StreamSpec = setting(cli=False)
    evals: tuple[str, ...] = setting(
        cli=False, option=Option(flag="--eval")
    )  # its option: olmax.evalsets.evalsets_cli
    tokenizer: str = setting("dolma2", "tokenizer file (or dolma2) the mix was tokenized with")
    ngram: int = setting(8, "retrieval window in words (default 8: survives one edit in ten words)")
    min_item_words: int = setting(4, "items with fewer words than this are too short to decide")
    threshold: float = setting(
        0.75, "flag when one document aligns this fraction of an item's words (default 0.75)"
    )
    short_words: int = setting(
        20,
        "items of at most this many words are short: found through their own windows and allowed "
        "min(--short-edits, words // 7) token edits (default 20)",
    )
    short_edits: int = setting(2, "token edits a short item may differ by, at most (default 2)")
    short_ngram: int = setting(
        4, "window in words a short item is also indexed by (0: none, only exact whole-item keys; default 4)"
    )
    answers: bool = setting(
        True,
        "skip the answer side: a completion task's gold continuation (HellaSwag endings, PIQA solutions, "
        "COPA choices, story endings) alone and joined to its context's end",
    )
    answer_words: int = setting(
        8, "a gold continuation of at least this many words is also looked for alone (default 8)"
    )
    join_words: int = setting(
        4,
        "context words before the answer in the context -> answer join (its last; the answer's first "
        "--answer-words follow; default 4)",
    )
    paraphrases: bool = setting(
        True,
        "skip the paraphrase candidates: the numbers, names and rare words of an item within a window "
        "(reported apart, never counted as copies)",
    )
    min_cover: float = setting(
        0.25,
        "verify an (item, document) pair when its matched windows cover this fraction of the item's "
        "words (at least one window)",
    )
    template_items: int = setting(
        10, "a window shared by this many eval items is a template and not used (default 10)"
    )
    max_docs_per_key: int = setting(
        1000, "hits kept per window: the first this many documents (bounds memory)"
    )
    gate: tuple[str, ...] | None = setting(
        None, "sets whose contamination fails the command (default all)"
    )  # None: every set gates
    clean_dir: str | None = setting(None, "write each set's uncontaminated items here as jsonl")
    threads: int = setting(
        2, "training files probed at once (default 2; the compiled passes release the GIL)"
    )
    chunk_tokens: int = setting(1 << 20, cli=False)  # tokens scanned per chunk of a file


@dataclass(frozen=True)
class DedupConfig:
    """The mix (`stream`: its mix, base dir, {TOKENIZER} value and work dir for spill files are read)
    and the duplicate limits."""

    CONFIG_KEY: ClassVar[str] = "audit.dedup"

    stream: StreamSpec = setting(cli=False)
    span: int = setting(50, "repeated-span length in tokens (ExactSubstr: 50)")
    min_doc_tokens: int = setting(32, "shorter documents are not compared (default 32)")
    max_dup_doc_frac: float = setting(
        0.01, "gate: fraction of document tokens in exact duplicate documents (default 0.01)"
    )
    max_repeated_span_frac: float = setting(
        0.05, "gate: fraction of tokens inside a later copy of a repeated span (default 0.05)"
    )
    chunk_tokens: int = setting(1 << 20, cli=False)  # tokens hashed per chunk of a file
    threads: int = setting(2, _THREADS)
    examples: int = setting(10, cli=False)  # examples listed per check
    near: NearSettings | None = setting(None, cli=False)  # --near: MinHash near-duplicate documents too
    max_near_dup_frac: float = setting(0.05, _NEAR_GATE, option=Option(group="near"))
    # --max-removed-frac [SOURCE=]X (per source, the near stage's removable share) and
    # --max-cluster-size N, registered with prepare's (olmax/dedup/gates_cli.py)
    max_removed_frac: tuple[str, ...] | None = setting(None, cli=False)
    max_cluster_size: int | None = setting(None, cli=False)


@dataclass(frozen=True)
class StreamConfig:
    """The mix and L the rows were cut from (`stream`: its mix, base dir, {TOKENIZER}, seq_len and work
    dir are read; G comes from the files) and one emitted-rows file per host."""

    CONFIG_KEY: ClassVar[str] = "audit.stream"

    stream: StreamSpec = setting(cli=False)
    batches: tuple[str, ...] = setting(help="one .npy per host, in host order", option=Option(metavar="FILE"))
    threads: int = setting(2, _THREADS)
    examples: int = setting(
        10_000, cli=False
    )  # repeated contents / foreign rows / overlaps listed in full up to this
