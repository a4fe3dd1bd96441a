"""poseidon.torch: PyTorch models in Poseidon. profile(): a module -> a model file, a measured
per-layer profile and a scenario for `poseidon simulate` (docs/torch.md)."""

from ._profile import profile

__all__ = ["profile"]
