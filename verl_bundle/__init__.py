"""verl-bundle: offline, CUDA-matched bundles of the verl stack for air-gapped GPU servers."""

__version__ = "0.1.0"
