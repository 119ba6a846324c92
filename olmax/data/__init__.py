"""Data: raw documents to OLMo token shards, mix files, the index, the order and the Grain loader."""
