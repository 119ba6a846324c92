"""The gates a dedup run cannot pass silently, shared by `data prepare --dedup` and `audit dedup`:
the share of each source's documents and of its text (tokens in the audit, UTF-8 bytes in prepare,
which decides before it tokenizes) removed by each stage (`--max-removed-frac [SOURCE=]X`), and the
largest cluster's size (`--max-cluster-size N`: one false cluster can take most of a source).

Stats, per source: {"documents": n, UNIT: u, "stages": {stage: {"documents": d, UNIT: x}}}, where a
stage's documents are those it removed or cut to nothing and its UNIT what it removed (a cut span's
bytes count, an edited document does not)."""

from __future__ import annotations

from dataclasses import dataclass

from olmax.errors import OlmaxError


@dataclass(frozen=True)
class Gate:
    """One gate's verdict: its measured value, its limit, and what it measured."""

    name: str
    ok: bool
    value: float | int
    threshold: float | int
    detail: str


def parse_removed_frac(values: list[str] | tuple[str, ...] | None) -> dict[str, float]:
    """`--max-removed-frac [SOURCE=]X ...` as {source or "": X} ("": every source not named)."""
    out: dict[str, float] = {}
    for v in values or ():
        source, _, x = v.rpartition("=")
        try:
            frac = float(x)
        except ValueError:
            frac = -1.0
        if not 0.0 <= frac <= 1.0:
            raise OlmaxError(
                f"--max-removed-frac {v!r}: give [SOURCE=]X with X a fraction in [0, 1] (e.g. 0.3 or web=0.5)"
            )
        out[source] = frac
    return out


def removed_frac_gates(stats: dict[str, dict], limits: dict[str, float], unit: str) -> list[Gate]:
    """Per source and stage: the larger of its removed documents' and removed `unit`'s shares."""
    unknown = sorted(set(limits) - set(stats) - {""})
    if unknown:
        raise OlmaxError(
            f"--max-removed-frac names source {unknown[0]!r}, which is not in this run "
            f"(sources: {', '.join(stats)})"
        )
    gates = []
    for source, s in stats.items():
        limit = limits.get(source, limits.get(""))
        if limit is None:
            continue
        for stage, r in s["stages"].items():
            docs = r["documents"] / max(1, s["documents"])
            units = r[unit] / max(1, s[unit])
            value = round(max(docs, units), 6)
            gates.append(
                Gate(
                    f"removed_frac[{stage}/{source}]",
                    value <= limit,
                    value,
                    limit,
                    f"{r['documents']:,} of {s['documents']:,} documents ({docs:.2%}), {r[unit]:,} of "
                    f"{s[unit]:,} {unit.replace('_', ' ')} ({units:.2%})",
                )
            )
    return gates


def cluster_gate(largest: int, limit: int | None) -> list[Gate]:
    """The largest cluster (a kept document and every one removed in its favour) against `limit`."""
    if limit is None:
        return []
    if limit < 1:
        raise OlmaxError(f"--max-cluster-size {limit}: give at least 1 (documents in one cluster)")
    detail = "documents in the largest cluster (the kept one and those removed in its favour)"
    return [Gate("max_cluster_size", largest <= limit, largest, limit, detail)]


def cluster_lines(clusters: list[dict], width: int = 48) -> list[str]:
    """The biggest clusters, one line each: size, then the first lines of a few members side by side
    (the kept one first), so a person sees at a glance whether they are copies."""
    lines = []
    for c in clusters:
        shown = " | ".join(_clip(t, width) for t in c.get("first_lines", []))
        lines.append(f"  {c['size']:>7,} docs, kept {c['kept']}: {shown}")
    return lines


def _clip(text: str, width: int) -> str:
    text = " ".join(text.split())
    return repr(text if len(text) <= width else text[: width - 1] + "…")
