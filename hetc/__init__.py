"""hetc: plan and serve PyTorch models across heterogeneous accelerators."""

__version__ = "0.1.0"
