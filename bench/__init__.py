"""olmax's benchmarks, studies and chip runs (bench/README.md): each a module run from the project's root,
`python -m bench.KIND.NAME [--smoke] [--results DIR]`, writing its record to bench/results/NAME.json."""
