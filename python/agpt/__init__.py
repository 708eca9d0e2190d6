"""agpt: pre-train large language models on supercomputers, and keep them training."""

__version__ = "0.1.0"
