"""Source builds compiled on the online host (compiler.py: `SourceCompiler`), with their toolkits, cost, work directory and the toolchain report."""
