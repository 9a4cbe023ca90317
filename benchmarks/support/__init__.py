"""The suite's own parts, which the benchmark modules (kernel, cpu, numerics, pipeline) and
ragbench use: the catalogue and grids, the harness, the workloads, the paired and drift runners.
Nothing here is a benchmark: asv imports these modules too, and finds no benchmark in them."""
