"""Triton kernels, their launch configurations and launchers. Private: use ``ragged``'s API."""
