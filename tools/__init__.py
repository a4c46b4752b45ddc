"""Tools beside the product: benchmarks, the chaos and soak harnesses, the scale harness, demo helpers, the model
fetcher and the generators of docs/CONFIG.md and docs/OBSERVABILITY.md.

Not part of the installed package (pyproject.toml lists only ``vcascade``'s packages). Run each from the repository
root as a module, ``python -m tools.bench_match --quick``; the tests import them as ``tools.<module>``. Tools use only
the product's public modules; the product never imports tools (tests/test_layers.py checks both directions).
"""
