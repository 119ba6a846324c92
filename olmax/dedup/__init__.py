"""Near-duplicate and substring deduplication (Dolma 3's stages): shingling, MinHash LSH, verified
clusters, repeated byte spans. Shared by `olmax data prepare --dedup` and `olmax audit dedup --near`."""
