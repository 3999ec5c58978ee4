"""What a wheel is, read without installing it: its structure (integrity), its declared licence
(licenses), and the torch, CUDA and C++ ABI a prebuilt one was built for (origin, elf)."""
