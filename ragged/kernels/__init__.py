"""Triton kernels, their launch configurations and launchers, below the rest of ``ragged``
(whose API is the one to use): forward (the kernels), config and tuning (which kernel and tile
a call gets, per GPU), attention (plans and launches), kept (the launches the fast paths keep),
launch, c_launch, fastpath (+ fastpath.cpp: the launch paths), packing (pack, unpack, CLS
gather), variants (candidate shapes, for ``experiments``). The benchmarks and
``ragbench.provenance`` read the configuration and plans here directly, to time and record
them."""
