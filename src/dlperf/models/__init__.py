"""Model registry: dlperf's own networks, torchvision's zoo, and users' files."""

from dlperf.models.registry import create_model, list_models, register_model

__all__ = ["create_model", "list_models", "register_model"]
