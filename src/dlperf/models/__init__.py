"""Model registry: dlperf's own networks, torchvision's zoo, and users' files.

Importing the package imports every model file, whose `@register_model` factories fill the
registry. `dlperf models` lists names from names.toml instead, without importing torch.
"""

from dlperf.models import cifar_resnet, course, smallcnn  # noqa: F401  (they register models)
from dlperf.models.registry import create_model, list_models, register_model

__all__ = ["create_model", "list_models", "register_model"]
