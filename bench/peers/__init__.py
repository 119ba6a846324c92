"""Speed benchmarks: olmax beside its peers (OLMo-core, HF transformers, `dolma tokens`, datatrove, ...) on
the same input and machine, or alone at a stated scale where no peer runs the same work."""
