"""OLMo 3 in Flax: configs, layers, transformer, HF conversion, parity and FLOP counts."""
